"""Hotword list syntax shared by config and protocol: ``"word"`` or ``"word:boost"``."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BOOST = 1.5
MAX_HOTWORDS = 1000
MAX_HOTWORD_CHARS = 64


@dataclass(frozen=True)
class Hotword:
    text: str
    boost: float = DEFAULT_BOOST


def parse_hotword(entry: str) -> Hotword:
    """Parse one entry; raise ``ValueError`` with a message a client can act on."""
    text, sep, boost_text = entry.rpartition(":")
    if not sep:
        text, boost = entry, DEFAULT_BOOST
    else:
        try:
            boost = float(boost_text)
        except ValueError:
            raise ValueError(f"hotword {entry!r}: boost after ':' must be a number") from None
    text = text.strip()
    if not text:
        raise ValueError(f"hotword {entry!r} is empty")
    if len(text) > MAX_HOTWORD_CHARS:
        raise ValueError(f"hotword {entry!r} is longer than {MAX_HOTWORD_CHARS} characters")
    if not 0.0 < boost <= 20.0:
        raise ValueError(f"hotword {entry!r}: boost must be in (0, 20]")
    return Hotword(text, boost)


def parse_hotwords(entries: list[str]) -> tuple[Hotword, ...]:
    if len(entries) > MAX_HOTWORDS:
        raise ValueError(f"at most {MAX_HOTWORDS} hotwords are accepted, got {len(entries)}")
    return tuple(parse_hotword(entry) for entry in entries)
