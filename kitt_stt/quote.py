"""Client text inside messages, bounded: a hostile client must not get its input echoed at length.

Error frames, log lines and exceptions that name what a client sent (a hotword, a language, a
frame type) quote it through :func:`quoted`, so an answer stays small whatever the input was:
a 60 KB hotword once came back as a 120 KB ``bad_field`` frame (quoted twice), and a client that
does not read could make the server hold megabytes of such answers.
"""

from __future__ import annotations

#: Characters of client text shown in a message; the rest is counted, not shown.
MAX_QUOTED_CHARS = 64


def quoted(value: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of ``value``, with the full length when it was cut."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"
