"""Inverse text normalisation: numbers, times, temperatures and percentages as digits.

Whisper writes what was said ("调到二十六度", "twenty six degrees"); an assistant wants "调到26度",
"26 degrees".  SenseVoice normalises by itself (``use_itn``), so this step runs only where the
engine did not.  The grammars are WeTextProcessing's, run by ``wetext`` on kaldifst (chosen over
WeTextProcessing itself, cn2an, text2num and NeMo by the comparison in ``docs/text.md``); their
written forms are then put back into the words the speaker used for units (:mod:`.itn_style`).
The grammars see the text between its punctuation marks, English clock times already written
(:mod:`.itn_context`).
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, ConfigDict

from kitt_stt.text.itn_context import english_number_words, lowered_start, restored_start, split_punctuation
from kitt_stt.text.itn_style import spoken_units
from kitt_stt.text.language import TextLanguage


class ItnParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Keep units, times of day and dates in the speaker's words ("26度", "20分钟", "下午3:15",
    #: "20 minutes") instead of the grammars' abbreviations ("26°", "20min", "3:15p.m.", "20 min").
    spoken_units: bool = True


_normalizers: dict[TextLanguage, Any] = {}  # wetext.Normalizer per language, once loaded
_loading = threading.Lock()


def _normalizer(language: TextLanguage) -> Any:
    normalizer = _normalizers.get(language)
    if normalizer is None:
        with _loading:
            normalizer = _normalizers.get(language)
            if normalizer is None:
                from wetext import Normalizer  # reads every grammar: only when first needed

                normalizer = _normalizers[language] = Normalizer(lang=str(language), operator="itn")
    return normalizer


class InverseNormalizer(ABC):
    """Rewrites spoken numbers as digits."""

    @abstractmethod
    def normalize(self, text: str, language: TextLanguage) -> str:
        """``text`` with its numbers, times, measures and percentages written with digits."""


class WetextNormalizer(InverseNormalizer):
    """WeTextProcessing's ITN grammars through ``wetext``.

    ``wetext`` reads all its grammars when imported (~0.3 s, tens of MB), so the import happens on
    first use (or :meth:`load` at start-up), once per process, under a lock.  A call costs 1-2 ms
    for a short command and grows with the text (``docs/text.md``); kaldifst holds the GIL while
    it runs, so a text without a number word or numeral (most commands) does not go to it, and the
    service runs the grammars in a worker process (:mod:`.offload`).
    """

    def __init__(self, params: ItnParams | None = None) -> None:
        self._params = params or ItnParams()

    @property
    def params(self) -> ItnParams:
        return self._params

    def normalize(self, text: str, language: TextLanguage) -> str:
        if not has_number(text, language):
            return text
        written = []
        for index, piece in enumerate(_split_kept(text, language)):  # words that only look like numbers stay
            if index % 2:
                written.append(piece)
                continue
            # the grammars see only the runs between punctuation marks, so no mark gains a space
            runs = split_punctuation(piece)
            written += [run if at % 2 else self._normalize_piece(run, language) for at, run in enumerate(runs)]
        return "".join(written)

    def _normalize_piece(self, text: str, language: TextLanguage) -> str:
        if not text.strip() or not has_number(text, language):
            return text
        spoken, capital = text.strip(), ""
        if language is TextLanguage.EN:
            spoken, capital = lowered_start(english_number_words(spoken), _EN_NUMBER)
        written = _normalizer(language).normalize(spoken) if has_number(spoken, language) else spoken
        written = restored_start(written, capital)
        if self._params.spoken_units:
            written = spoken_units(written, text.strip(), language)
        lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
        return lead + written + trail

    @staticmethod
    def load() -> None:
        """Read the grammars now rather than at the first final."""
        for language in TextLanguage:
            _normalizer(language)


# Words the grammars would turn into numbers although they are none: "wait a second", "call mom
# first", "first of all" (an ordinal after "the", a tens word or a month: "the third exit", "twenty
# first", "march third"),
# "十分感谢" (十分 is "very" unless minutes or a fraction follow, 十分钟, 十分之一, or a numeral comes
# before, 三十分, 两点十分). Split out and
# left as they are.
_EN_KEEP = re.compile(r"\b(?:first|second|third)\b", re.IGNORECASE)
_EN_ORDINAL_BEFORE = re.compile(r"\b(?:the|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|january|february"
                                r"|march|april|may|june|july|august|september|october|november|december)[\s-]$",
                                re.IGNORECASE)
_ZH_KEEP = re.compile(r"(?<![零〇一二三四五六七八九两点])十分(?![钟鐘之])")  # 三十分, 两点十分: minutes


def _split_kept(text: str, language: TextLanguage) -> list[str]:
    """``text`` in pieces; the odd ones are words to keep as they are."""
    if language is TextLanguage.EN:
        spans = [m.span() for m in _EN_KEEP.finditer(text) if not _EN_ORDINAL_BEFORE.search(text[: m.start()])]
    else:
        spans = [m.span() for m in _ZH_KEEP.finditer(text)]
    pieces, last = [], 0
    for start, end in spans:
        pieces += [text[last:start], text[start:end]]
        last = end
    return [*pieces, text[last:]]


_ZH_NUMERALS = frozenset("零〇一二三四五六七八九十百千万亿两幺壹贰叁肆伍陆柒捌玖拾佰仟萬億兩")
_EN_NUMBER = re.compile(
    r"\b(?:zero|oh|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred"
    r"|thousand|million|billion|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh"
    r"|twelfth|\w+teenth|\w+tieth|hundredth|thousandth|millionth|billionth)\b", re.IGNORECASE)


def has_number(text: str, language: TextLanguage) -> bool:
    """Whether the grammars could change ``text``: a numeral character, or a number word (cardinal
    or ordinal, "oh" as in "oh five").  Cheap, and most in-car commands have none."""
    if language is TextLanguage.ZH:
        return any(char in _ZH_NUMERALS for char in text)
    return _EN_NUMBER.search(text) is not None
