"""Joining the texts of chunks, segments and turns so that the pause between them leaves no trace.

The one rule every text that spans a pause goes through (a final's chunks, a turn's finals, a
file's segments); it is ``docs/protocol.md``'s (``commit``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable


def join_texts(parts: Iterable[str]) -> str:
    """Join segment or chunk texts so that the pause between them leaves no trace.

    A segment's (or chunk's) text is cut wherever the speaker paused, so the join must give
    what the model would have written for the audio in one piece: a space where that script
    separates words ("open the" + "door", "문을" + "열어", "please." + "Open"), none where it
    does not ("打开" + "车门", "打开" + "GPS", "車門を" + "開けて"), none before closing
    punctuation ("Open" + ", now") and none after opening punctuation.  The rule is
    ``docs/protocol.md`` (``commit``), which also holds for the chunks of one ``final``.
    """
    joined = ""
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if joined and _space_between(joined[-1], part[0]):
            joined += " "
        joined += part
    return joined


def _space_between(left: str, right: str) -> bool:
    """Whether the last character of one part and the first of the next want a space."""
    if right in _CLOSING_PUNCTUATION or left in _OPENING_PUNCTUATION:
        return False
    return not (_unspaced(left) or _unspaced(right))


_CLOSING_PUNCTUATION = frozenset(".,!?;:)]}'\"…%”’»")
_OPENING_PUNCTUATION = frozenset("([{“‘«¿¡")

# Code point ranges of scripts written without spaces between words, and of the punctuation and
# symbols used inside such text (CJK fullwidth punctuation).  Everything else (Latin, Cyrillic,
# Greek, Hangul, Arabic, Devanagari, digits, ASCII punctuation, ...) is written with spaces.
# Python's unicodedata has no Script property, hence the explicit blocks; east_asian_width is
# not the rule: Hangul is wide but Korean separates words with spaces.
_UNSPACED_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FFF),  # CJK radicals, Kangxi radicals, ideographic description characters
    (0x3000, 0x303F),  # CJK symbols and punctuation (、。「」〇 and the ideographic space)
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3190, 0x31FF),  # Kanbun, Bopomofo extended, CJK strokes, Katakana phonetic extensions
    (0x3200, 0x33FF),  # enclosed CJK letters, CJK compatibility
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA000, 0xA4CF),  # Yi
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE10, 0xFE1F),  # vertical forms
    (0xFE30, 0xFE6F),  # CJK compatibility forms, small form variants
    (0xFF00, 0xFF9F),  # fullwidth forms (，。！？（）Ａ１), halfwidth CJK punctuation and Katakana
    (0xFFE0, 0xFFEF),  # fullwidth and halfwidth symbols (￥ ￡); halfwidth Hangul (FFA0-FFDF) is spaced
    (0x16FE0, 0x16FFF),  # ideographic symbols (iteration marks)
    (0x1B000, 0x1B16F),  # Kana supplement and extended
    (0x20000, 0x3FFFF),  # CJK unified ideographs extensions B and later, compatibility supplement
)
_UNSPACED_STARTS = tuple(start for start, _ in _UNSPACED_RANGES)


def _unspaced(char: str) -> bool:
    """Whether ``char`` belongs to a script (or its punctuation) written without spaces."""
    code = ord(char)
    index = bisect_right(_UNSPACED_STARTS, code) - 1
    return index >= 0 and code <= _UNSPACED_RANGES[index][1]
