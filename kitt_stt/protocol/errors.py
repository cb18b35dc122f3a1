"""Stable error codes of protocol v1 (``docs/protocol.md`` lists when each is sent)."""

from __future__ import annotations

from kitt_stt.str_enum import StrEnum


class ErrorCode(StrEnum):
    BAD_FRAME = "bad_frame"
    BAD_FIELD = "bad_field"
    BAD_AUDIO = "bad_audio"
    TOO_MANY_SEATS = "too_many_seats"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    IDLE_TIMEOUT = "idle_timeout"
    SLOW_CONSUMER = "slow_consumer"
    UNAUTHORIZED = "unauthorized"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """A client frame we refuse; becomes one ``error`` frame, the session goes on."""

    def __init__(self, code: ErrorCode, message: str, seat: str | None = None, fatal: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.seat = seat
        self.fatal = fatal
