"""Process logging set-up: plain text or one JSON object per line, session/seat ids attached,
and optionally the in-memory ring behind ``/debug/logs``."""

from __future__ import annotations

import logging
import sys

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
