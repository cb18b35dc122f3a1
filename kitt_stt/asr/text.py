"""Text post-processing shared by engines: SenseVoice tags out, language code normalised."""

from __future__ import annotations

import re

_TAG = re.compile(r"<\|[^|<>]*\|>")
_SPACES = re.compile(r"\s+")


def strip_tags(text: str) -> str:
    """Remove SenseVoice's ``<|...|>`` tags (language, emotion, event, ITN) from text."""
    return _SPACES.sub(" ", _TAG.sub("", text)).strip()


def tag_value(tag: str | None) -> str | None:
    """``"<|zh|>"`` -> ``"zh"``; empty or missing -> ``None``."""
    if not tag:
        return None
    value = tag.strip()
    if value.startswith("<|") and value.endswith("|>"):
        value = value[2:-2]
    return value or None
