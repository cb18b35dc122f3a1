"""Mixed Chinese/Latin text as a sequence of comparable sound tokens, each tied to its characters.

Wake phrases are matched on what was *heard*, not on how the engine spelled it: a Han character
becomes its toneless pinyin syllable (so 小凯 / 小开 / 晓凯 / 小楷 all read ``xiao kai``), a run of
letters or digits becomes one lower-cased word.  Each token keeps the span of characters it came
from, so a match can be cut out of the original text exactly.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

# pypinyin reads a phrase dictionary at import: 56 MB resident with it, 12 MB without (docs/text.md),
# and three times slower conversions, for context readings of polyphones that
# wake matching does not need (the phrase and what was heard are read alike).  Only this module
# imports pypinyin; an environment that sets these keeps its choice.
os.environ.setdefault("PYPINYIN_NO_PHRASES", "1")
os.environ.setdefault("PYPINYIN_NO_DICT_COPY", "1")

from pypinyin import Style, lazy_pinyin

# Han ideographs pypinyin has readings for: CJK unified ideographs and extension A, compatibility
# ideographs, extensions B and later.  Everything else that is a letter or digit forms words.
_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF))
_APOSTROPHES = frozenset("'’")
# Confusions of regional accents and of the recognisers themselves, applied to both sides of a
# comparison: retroflex and flat initials (zh/z, ch/c, sh/s), n/l, and front/back nasal finals
# (ang/an, eng/en, ing/in, which also covers iang/ian and uang/uan).
_FLAT_INITIALS = (("zh", "z"), ("ch", "c"), ("sh", "s"))
_BACK_NASALS = ("ang", "eng", "ing")


@dataclass(frozen=True)
class Token:
    """One heard unit: ``key`` is what is compared, ``text[start:end]`` what was written."""

    key: str
    start: int
    end: int
    han: bool


def is_han(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _HAN_RANGES)


def is_word_char(char: str) -> bool:
    """A letter or digit outside Han: part of a word written with spaces (Latin, digits, kana, ...)."""
    return char.isalnum() and not is_han(char)


def is_separator(char: str) -> bool:
    """Spaces, punctuation and symbols other than currency: what may sit between a wake phrase and
    the command (``"hey kitt, open"``, ``"你好小凯，打开"``) and is removed with the phrase."""
    if char.isspace():
        return True
    category = unicodedata.category(char)
    return category[0] == "P" or category in ("Sm", "Sk", "So")


def tokenize(text: str, start: int = 0, limit: int | None = None, fuzzy: bool = True) -> list[Token]:
    """Tokens of ``text`` from character ``start``, at most ``limit`` of them.

    Wake matching only ever looks at the beginning of a text, so ``limit`` keeps the cost of a
    long final independent of its length.  ``fuzzy`` folds the pinyin confusions above.
    """
    tokens: list[Token] = []
    position, length = start, len(text)
    while position < length and (limit is None or len(tokens) < limit):
        char = text[position]
        if is_han(char):
            end = position + 1
            room = None if limit is None else limit - len(tokens)
            while end < length and is_han(text[end]) and (room is None or end - position < room):
                end += 1
            for offset, syllable in enumerate(syllables(text[position:end])):
                key = fold(syllable) if fuzzy else syllable
                tokens.append(Token(key, position + offset, position + offset + 1, han=True))
            position = end
        elif is_word_char(char):
            end = position + 1
            while end < length and (is_word_char(text[end]) or (
                    text[end] in _APOSTROPHES and end + 1 < length and is_word_char(text[end + 1]))):
                end += 1
            tokens.append(Token(word_key(text[position:end]), position, end, han=False))
            position = end
        else:
            position += 1
    return tokens


@lru_cache(maxsize=4096)
def syllables(run: str) -> tuple[str, ...]:
    """Toneless pinyin of a run of Han characters, one syllable per character (a polyphone gets its
    most common reading, the same in a phrase as in what was heard).  Cached: interims repeat the
    same beginning many times.
    """
    readings = lazy_pinyin(run, style=Style.NORMAL)
    if len(readings) != len(run):  # characters without a reading come back as one piece: go one by one
        readings = [lazy_pinyin(char, style=Style.NORMAL)[0] for char in run]
    return tuple(readings)


def fold(syllable: str) -> str:
    """A pinyin syllable with the confusable initials and finals folded (``zhang`` -> ``zan``)."""
    for retroflex, flat in _FLAT_INITIALS:
        if syllable.startswith(retroflex):
            syllable = flat + syllable[len(retroflex):]
            break
    if syllable.startswith("n"):
        syllable = "l" + syllable[1:]
    if syllable.endswith(_BACK_NASALS):
        syllable = syllable[:-1]
    return syllable


def word_key(word: str) -> str:
    """Lower case, apostrophes dropped and doubled letters collapsed (``Kitt`` -> ``kit``, ``it's`` ->
    ``its``): spelling differences recognisers make that say nothing about what was heard.  Digits
    are kept as written (``100`` is not ``10``)."""
    letters = "".join(char for char in word.casefold() if char not in _APOSTROPHES)
    return "".join(char for index, char in enumerate(letters)
                   if index == 0 or char != letters[index - 1] or not char.isalpha())


def skip_separators(text: str, position: int) -> int:
    """The first position at or after ``position`` that is not a separator."""
    while position < len(text) and is_separator(text[position]):
        position += 1
    return position
