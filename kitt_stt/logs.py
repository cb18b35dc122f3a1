"""Process logging set-up: plain text or one JSON object per line, session/seat ids attached,
and optionally the in-memory ring behind ``/debug/logs``."""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from kitt_stt.config.schema import AppConfig
from kitt_stt.observability.logbuffer import ContextFilter, JsonFormatter, RecentLogBuffer


class TextFormatter(logging.Formatter):
    """Plain lines with ``[session/seat]``; ``-`` outside a session instead of ``None``."""

    def format(self, record: logging.LogRecord) -> str:
        record.ids = f"[{getattr(record, 'session', None) or '-'}/{getattr(record, 'seat', None) or '-'}]"
        return super().format(record)


def configure_logging(config: AppConfig) -> RecentLogBuffer | None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if config.logging.json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(ids)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.logging.level.upper())
    if not config.debug.logs_enabled:
        return None
    ring = RecentLogBuffer(config.debug.logs_max_bytes, config.debug.logs_max_records)
    root.addHandler(ring)
    return ring


@contextmanager
def root_info_silenced(package: str) -> Iterator[None]:
    """Drop the INFO and DEBUG lines that ``package``'s code logs through the root logger meanwhile.

    onnxruntime's quantiser calls ``logging.info`` directly (the root logger, no name to filter
    by): quantising Whisper's decoder on the first ``make serve`` printed ~60 such lines.  A
    filter on the root logger sees only records logged on it, so named loggers are untouched.
    """
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not any(record.pathname.startswith(p) for p in locations)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)
