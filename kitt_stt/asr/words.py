"""Words from timed tokens: which characters make a word, and each word's time and confidence.

The rules are the wire's (``docs/protocol.md``, "Words"): a Han, Kana or Thai character is a word
of its own (these scripts write no spaces, and one character is what a listener can point at);
Latin, Hangul and other space-separated scripts make words as written, a token starting with a
space (SentencePiece's ``▁``) beginning a new one; punctuation belongs to the word before it (or,
at the very start, to the word after it; a text of punctuation only is one word). A word starts
where its first token starts and ends where its last one ends; its confidence is its weakest
token's, because one misheard character is enough to make "打开车门" a different command.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

_SINGLE_CHARACTER_SCRIPTS = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x0E00, 0x0E7F),  # Thai
    (0x20000, 0x3134F),  # CJK extensions B-G
)

_INNER_PUNCTUATION = "'’-"  # inside a Latin word ("don't", "e-mail"): the word goes on


@dataclass(frozen=True)
class TimedToken:
    """One emitted token: its text as the vocabulary writes it (a leading space marks a word
    start), its time in ms from the decode's first sample, and the model's probability for it."""

    text: str
    start_ms: int
    end_ms: int
    confidence: float


@dataclass(frozen=True)
class TimedWord:
    text: str
    start_ms: int
    end_ms: int
    confidence: float

    def shifted(self, offset_ms: int) -> TimedWord:
        return replace(self, start_ms=self.start_ms + offset_ms, end_ms=self.end_ms + offset_ms)


def is_single_character_word(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _SINGLE_CHARACTER_SCRIPTS)


def is_punctuation(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


@dataclass
class _Draft:
    text: str
    start_ms: int
    end_ms: int
    confidence: float
    open: bool  # more letters of the same word may follow (not a single-character word)

    def add(self, char: str, token: TimedToken) -> None:
        self.text += char
        self.start_ms = min(self.start_ms, token.start_ms)
        self.end_ms = max(self.end_ms, token.end_ms)
        self.confidence = min(self.confidence, token.confidence)


def words_from_tokens(tokens: Iterable[TimedToken]) -> list[TimedWord]:
    """The words the tokens spell, by the rules in the module docstring."""
    drafts: list[_Draft] = []
    leading: list[tuple[str, TimedToken]] = []  # punctuation before the first word
    for token in tokens:
        starts_word = token.text[:1].isspace()
        for char in token.text:
            if char.isspace():
                if drafts:
                    drafts[-1].open = False
                continue
            if unicodedata.category(char)[0] == "M" and drafts:  # a combining mark (Thai vowels, accents)
                drafts[-1].add(char, token)
                continue
            if is_punctuation(char):
                if drafts:
                    drafts[-1].add(char, token)
                    drafts[-1].open = drafts[-1].open and char in _INNER_PUNCTUATION
                else:
                    leading.append((char, token))
                continue
            single = is_single_character_word(char)
            if drafts and drafts[-1].open and not single and not starts_word:
                drafts[-1].add(char, token)
            else:
                draft = _Draft("", token.start_ms, token.end_ms, token.confidence, not single)
                for mark, mark_token in leading:  # the punctuation before it is part of the word, times too
                    draft.add(mark, mark_token)
                draft.add(char, token)
                drafts.append(draft)
                leading = []
            starts_word = False
    if leading:  # punctuation and nothing after it: a word of its own, so the words still cover the text
        first = leading[0][1]
        drafts.append(_Draft("", first.start_ms, first.end_ms, first.confidence, False))
        for mark, mark_token in leading:
            drafts[-1].add(mark, mark_token)
    return [TimedWord(d.text, d.start_ms, d.end_ms, round(d.confidence, 4)) for d in drafts]


def overall_confidence(words: Sequence[TimedWord]) -> float | None:
    """A text's confidence from its words': their geometric mean, the per-word likelihood (one
    weak word lowers it without one long sentence hiding it, nor one word zeroing it); None
    without words, since nothing was heard to be sure of."""
    if not words:
        return None
    return round(math.exp(sum(math.log(max(word.confidence, 1e-9)) for word in words) / len(words)), 4)
