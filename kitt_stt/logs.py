"""Process logging set-up: plain text or one JSON object per line, session/seat ids attached,
and optionally the in-memory ring behind ``/debug/logs``."""

from __future__ import annotations

import logging
import sys

from kitt_stt.config.schema import AppConfig
from kitt_stt.observability.logbuffer import ContextFilter, JsonFormatter, RecentLogBuffer


def configure_logging(config: AppConfig) -> RecentLogBuffer | None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if config.logging.json_format:
        handler.setFormatter(JsonFormatter())
    else:
        text_format = "%(asctime)s %(levelname)s %(name)s [%(session)s/%(seat)s]: %(message)s"
        handler.setFormatter(logging.Formatter(text_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.logging.level.upper())
    if not config.debug.logs_enabled:
        return None
    ring = RecentLogBuffer(config.debug.logs_max_bytes, config.debug.logs_max_records)
    root.addHandler(ring)
    return ring
