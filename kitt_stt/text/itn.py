"""Inverse text normalisation: numbers, times, temperatures and percentages as digits.

Whisper writes what was said ("调到二十六度", "twenty six degrees"); an assistant wants "调到26度",
"26 degrees".  SenseVoice normalises by itself (``use_itn``), so this step runs only where the
engine did not.  The grammars are WeTextProcessing's, run by ``wetext`` on kaldifst (chosen over
WeTextProcessing itself, cn2an, text2num and NeMo by the comparison in ``docs/text.md``); their
written forms are then put back into the words the speaker used for units (:mod:`.itn_style`).
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, ConfigDict

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
    it runs, so a text without a number word or numeral (most commands) does not go to it.
    """

    def __init__(self, params: ItnParams | None = None) -> None:
        self._params = params or ItnParams()

    def normalize(self, text: str, language: TextLanguage) -> str:
        if not _has_number(text, language):
            return text
        written = _normalizer(language).normalize(text)
        return spoken_units(written, text, language) if self._params.spoken_units else written

    @staticmethod
    def load() -> None:
        """Read the grammars now rather than at the first final."""
        for language in TextLanguage:
            _normalizer(language)




_ZH_NUMERALS = frozenset("零〇一二三四五六七八九十百千万亿两幺壹贰叁肆伍陆柒捌玖拾佰仟萬億兩")
_EN_NUMBER = re.compile(
    r"\b(?:zero|oh|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred"
    r"|thousand|million|billion|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh"
    r"|twelfth|\w+teenth|\w+tieth|hundredth|thousandth|millionth|billionth)\b", re.IGNORECASE)


def _has_number(text: str, language: TextLanguage) -> bool:
    """Whether the grammars could change ``text``: a numeral character, or a number word (cardinal
    or ordinal, "oh" as in "oh five").  Cheap, and most in-car commands have none."""
    if language is TextLanguage.ZH:
        return any(char in _ZH_NUMERALS for char in text)
    return _EN_NUMBER.search(text) is not None
