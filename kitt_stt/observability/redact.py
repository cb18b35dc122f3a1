"""Keep secrets out of logs: the ``?token=`` of browser clients is part of the request path, and
uvicorn's access and error lines print the path with its raw query string.

The server reads the token from the *parsed* query (Starlette decodes ``%74oken`` to ``token``),
so the redactor reads each parameter's name the same way, decoded and case-folded, rather than
matching a spelling: whatever name the server could take for a credential, its value is never
logged. The name stays as the client wrote it, so the line still shows what was asked.

Where a query ends is read generously, never as a browser would: h11 accepts a quote or a ``#`` in a
request target and Starlette still reads a ``token`` after it (``?x"&token=`` was let in, and
logged in clear). A request target (uvicorn's access-line argument) is query from its first ``?``
to its end; in free text a query runs from a ``?`` to the next whitespace. Within a query, a ``?``
may start a parameter as well as ``&`` does: uvicorn logs the *decoded* path before the raw query, so
a ``%3F`` in the path puts a ``?`` ahead of the real one; redacting a little more is the safe side.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
#: Parameter names (decoded, case-folded) whose values are credentials.
CREDENTIAL_NAMES = frozenset({"token", "access_token", "auth_token", "api_key", "apikey", "password"})
_MAX_DECODES = 4  # a name encoded more than once is decoded again, so "%2574oken" is caught too

_QUERY = re.compile(r"\?(\S*)")  # a query string in free text: up to whitespace, whatever else it holds
_PARAMETER = re.compile(r"[^&]+")  # split on "&" only, as Starlette does: a value runs to the next "&"


def redact(text: str) -> str:
    """``text`` with the value of every credential parameter of every query string in it replaced."""
    if "?" not in text:
        return text
    return _QUERY.sub(lambda match: "?" + _redact_query(match.group(1)), text)


def redact_target(target: str) -> str:
    """A request target (``/path?query``, as uvicorn's access line passes it) with every credential
    value replaced: all of it after the first ``?`` is query, whatever characters it holds."""
    path, mark, query = target.partition("?")
    return path + mark + _redact_query(query) if mark else target


def is_credential(name: str) -> bool:
    """Whether a raw query parameter name means a credential, however it is encoded or cased."""
    for _ in range(_MAX_DECODES):
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    return name.strip().casefold() in CREDENTIAL_NAMES


def _redact_query(query: str) -> str:
    return _PARAMETER.sub(_redact_parameter, query)


def _redact_parameter(match: re.Match[str]) -> str:
    """One ``&``-separated parameter; a credential may start there or after any ``?`` in it."""
    parameter = match.group(0)
    starts = [0] + [index + 1 for index, char in enumerate(parameter) if char == "?"]
    for start in starts:
        name, equals, value = parameter[start:].partition("=")
        if equals and value and "?" not in name and is_credential(name):
            return f"{parameter[:start]}{name}={REDACTED}"
    return parameter


class TokenRedactor(logging.Filter):
    """Redacts tokens in a record's message and in its string arguments, keeping the arguments'
    shape (uvicorn's access formatter unpacks them); every record passes (nothing is dropped).
    An argument that starts with ``/`` is a request target (:func:`redact_target`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_argument(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _redact_argument(arg) for key, arg in record.args.items()}
        return True


def _redact_argument(arg: object) -> object:
    if not isinstance(arg, str):
        return arg
    return redact_target(arg) if arg.startswith("/") else redact(arg)


def redact_handlers(logger_names: tuple[str, ...] = ("", "uvicorn", "uvicorn.error", "uvicorn.access")) -> None:
    """Install the redactor on every handler of these loggers (call after uvicorn configured its own):
    a handler-level filter sees records propagated from child loggers too."""
    redactor = TokenRedactor()
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(existing, TokenRedactor) for existing in handler.filters):
                handler.addFilter(redactor)
