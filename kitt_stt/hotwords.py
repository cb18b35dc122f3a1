"""Hotword list syntax shared by config and protocol: ``"word"`` or ``"word:boost"``."""

from __future__ import annotations

from dataclasses import dataclass

from kitt_stt.quote import quoted

DEFAULT_BOOST = 1.5
MAX_HOTWORDS = 1000
MAX_HOTWORD_CHARS = 64


@dataclass(frozen=True)
class Hotword:
    text: str
    boost: float = DEFAULT_BOOST


def parse_hotword(entry: str) -> Hotword:
    """Parse one entry; raise ``ValueError`` with a message a client can act on.

    The boost is what follows the *last* colon, so a hotword that itself contains a colon
    (``"12:30"``, ``"ratio:high"``) must end with an explicit boost (``"12:30:1.5"``).  An entry
    whose last part is not a usable boost is refused rather than guessed at, and the message
    says how to write it, because a silently re-read entry would bias the wrong words.
    """
    text, sep, boost_text = entry.rpartition(":")
    if not sep:
        text, boost = entry, DEFAULT_BOOST
    else:
        boost = _parse_boost(entry, boost_text)
    text = text.strip()
    if not text:
        raise ValueError(f"hotword {quoted(entry)} is empty")
    if len(text) > MAX_HOTWORD_CHARS:
        raise ValueError(f"hotword {quoted(entry)} is longer than {MAX_HOTWORD_CHARS} characters")
    return Hotword(text, boost)


def _parse_boost(entry: str, boost_text: str) -> float:
    """The boost after the last colon of ``entry``: a number in (0, 20]."""
    try:
        boost = float(boost_text)
    except ValueError:
        raise ValueError(f"hotword {quoted(entry)}: boost after the last ':' must be a number; "
                         f"{_colon_hint(entry)}") from None
    if not 0.0 < boost <= 20.0:
        raise ValueError(f"hotword {quoted(entry)}: boost after the last ':' must be in (0, 20]; "
                         f"{_colon_hint(entry)}")
    return boost


def _colon_hint(entry: str) -> str:
    """How to write ``entry`` if its colon belongs to the word (the commonest cause of a bad boost)."""
    example = entry + ":" + str(DEFAULT_BOOST) if len(entry) <= MAX_HOTWORD_CHARS else "12:30:1.5"  # bounded
    return f"a hotword containing ':' needs an explicit boost, e.g. {example!r}"


def parse_hotwords(entries: list[str]) -> tuple[Hotword, ...]:
    if len(entries) > MAX_HOTWORDS:
        raise ValueError(f"at most {MAX_HOTWORDS} hotwords are accepted, got {len(entries)}")
    return tuple(parse_hotword(entry) for entry in entries)
