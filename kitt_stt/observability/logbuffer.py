"""Recent structured log records in memory, capped by bytes and by count, plus log context.

``/debug/logs`` serves this ring; it is off by default and needs a token when on, because log
records can contain what people said.  Records carry the session/seat/segment/turn ids from
context variables set by the connection and the seat pipeline.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections import deque
from typing import Any

session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)
seat_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("seat_id", default=None)
CONTEXT_FIELDS = ("session", "seat", "segment", "turn")
MAX_MESSAGE_CHARS = 4096


class ContextFilter(logging.Filter):
    """Adds the current session and seat to every record (explicit ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "session", None) is None:
            record.session = session_id.get()
        if getattr(record, "seat", None) is None:
            record.seat = seat_id.get()
        return True


def record_dict(record: logging.LogRecord) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "ts": round(record.created, 3),
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": record.getMessage()[:MAX_MESSAGE_CHARS],
    }
    for field in CONTEXT_FIELDS:
        value = getattr(record, field, None)
        if value is not None:
            entry[field] = value
    return entry


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = record_dict(record)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)[-MAX_MESSAGE_CHARS:]
        return json.dumps(entry, ensure_ascii=False)


class RecentLogBuffer(logging.Handler):
    """Keeps the newest records whose JSON fits in ``max_bytes`` and ``max_records``."""

    def __init__(self, max_bytes: int, max_records: int) -> None:
        super().__init__()
        self._max_bytes = max_bytes
        self._max_records = max_records
        self._records: deque[tuple[str, int]] = deque()
        self._bytes = 0
        self._guard = threading.Lock()
        self.addFilter(ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps(record_dict(record), ensure_ascii=False)
        except Exception:
            self.handleError(record)
            return
        size = len(line.encode())
        if size > self._max_bytes:
            return  # a single record larger than the whole budget is dropped, not stored
        with self._guard:
            self._records.append((line, size))
            self._bytes += size
            while self._bytes > self._max_bytes or len(self._records) > self._max_records:
                self._bytes -= self._records.popleft()[1]

    def lines(self) -> list[str]:
        with self._guard:
            return [line for line, _ in self._records]

    @property
    def nbytes(self) -> int:
        with self._guard:
            return self._bytes
