"""Keep secrets out of logs: the ``?token=`` of browser clients is part of the request path, and
uvicorn's access and error lines print the path with its query string."""

from __future__ import annotations

import logging
import re

_TOKEN_IN_QUERY = re.compile(r"(?i)([?&](?:access_)?token=)[^&\s\"']*")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    return _TOKEN_IN_QUERY.sub(lambda match: match.group(1) + REDACTED, text)


class TokenRedactor(logging.Filter):
    """Redacts tokens in a record's message and in its string arguments, keeping the arguments'
    shape (uvicorn's access formatter unpacks them); every record passes (nothing is dropped)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: redact(arg) if isinstance(arg, str) else arg for key, arg in record.args.items()}
        return True


def redact_handlers(logger_names: tuple[str, ...] = ("", "uvicorn", "uvicorn.error", "uvicorn.access")) -> None:
    """Install the redactor on every handler of these loggers (call after uvicorn configured its own):
    a handler-level filter sees records propagated from child loggers too."""
    redactor = TokenRedactor()
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(existing, TokenRedactor) for existing in handler.filters):
                handler.addFilter(redactor)
