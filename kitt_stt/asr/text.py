"""Text post-processing shared by engines: SenseVoice tags and Whisper's sound annotations out,
language code normalised."""

from __future__ import annotations

import re

_TAG = re.compile(r"<\|[^|<>]*\|>")
_SPACES = re.compile(r"\s+")


def strip_tags(text: str) -> str:
    """Remove SenseVoice's ``<|...|>`` tags (language, emotion, event, ITN) from text."""
    return _SPACES.sub(" ", _TAG.sub("", text)).strip()


_ANNOTATION = re.compile(r"\[[^\[\]]*\]|\([^()]*\)|[♪♫]")
_UNCLOSED_LEADING = re.compile(r"^\s*[\[(][^\s\])]*")


def strip_annotations(text: str) -> str:
    """Remove what Whisper writes for sounds rather than speech: ``[Music]``, ``(applause)``, ``♪``,
    and a leading tag it never closed (``[MUSIC go forward`` -> ``go forward``), which noise before
    the speech in a VAD segment's pre-roll provokes. CTranslate2 front ends suppress these tokens
    while decoding; sherpa-onnx's greedy search does not, so they are taken out of the text."""
    return _SPACES.sub(" ", _UNCLOSED_LEADING.sub("", _ANNOTATION.sub(" ", text))).strip()


def outside_annotations(words: list[str]) -> list[bool]:
    """For words as written one space apart: which keep speech once ``strip_annotations`` has taken
    its spans out of their joined text. An annotation can span words ("(door closes)"), so a word
    is judged by what of it lies outside every span, not on its own."""
    joined = " ".join(words)
    covered = bytearray(len(joined))
    spans = [match.span() for match in _ANNOTATION.finditer(joined)]
    leading = _UNCLOSED_LEADING.match(_ANNOTATION.sub(lambda m: " " * len(m.group()), joined))
    if leading is not None:
        spans.append(leading.span())
    for start, end in spans:
        covered[start:end] = b"\x01" * (end - start)
    kept, position = [], 0
    for word in words:
        rest = "".join(char for offset, char in enumerate(word, position) if not covered[offset])
        kept.append(any(char.isalnum() for char in rest))
        position += len(word) + 1
    return kept


def tag_value(tag: str | None) -> str | None:
    """``"<|zh|>"`` -> ``"zh"``; empty or missing -> ``None``."""
    if not tag:
        return None
    value = tag.strip()
    if value.startswith("<|") and value.endswith("|>"):
        value = value[2:-2]
    return value or None
