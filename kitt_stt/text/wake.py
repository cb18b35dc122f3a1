"""Wake phrases: settings, and finding a configured phrase at the start of a text.

In a car the microphone hears passengers, calls and the radio; a wake phrase said first ("你好小凯
打开车门", "hey kitt, open the window") marks the words meant for the assistant.  Recognisers
mishear wake phrases in predictable ways (homophones 小开 / 晓凯, a dropped or doubled character,
"hey kit"), so matching compares sounds (:mod:`kitt_stt.text.tokens`) with an edit distance whose
thresholds come from ``utils/performance/wake_thresholds.py`` (``docs/text.md``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from rapidfuzz.distance import Levenshtein

from kitt_stt.hotwords import DEFAULT_BOOST, Hotword
from kitt_stt.quote import quoted
from kitt_stt.str_enum import StrEnum
from kitt_stt.text.tokens import Token, skip_separators, tokenize

MAX_WAKE_PHRASES = 16
MAX_WAKE_PHRASE_CHARS = 32
DEFAULT_FOLLOW_UP_MS = 8000
# Chosen from the measured trade-off between false and missed wakes (docs/text.md, "Thresholds").
DEFAULT_MIN_SCORE_HAN = 0.75
DEFAULT_MIN_SCORE_HAN_SHORT = 0.9
DEFAULT_MIN_SCORE_LATIN = 0.8
DEFAULT_MAX_END_DISTANCE = 0.5
#: Wake phrases said over and over ("小凯小凯小凯…") are all stripped, up to this many.
MAX_REPEATS = 8
#: Chinese phrases of at most this many syllables (小凯) are held to ``min_score_han_short``: with
#: two syllables one near syllable is already half the phrase (小孩, 小海 are not 小凯).
SHORT_PHRASE_SYLLABLES = 2
#: What an extra heard token costs when it repeats the token before it (a stutter, or a recogniser
#: writing one character twice: 你好小小凯); any other extra or missing token costs 1.
REPEATED_TOKEN_COST = 0.5


class WakeMode(StrEnum):
    """``off``: no detection, text untouched; ``detect``: wake phrases are found, stripped and
    reported, every turn is committed; ``required``: only woken turns (and their follow-ups) are."""

    OFF = "off"
    DETECT = "detect"
    REQUIRED = "required"


class WakeMatchParams(BaseModel):
    """How close heard words must be to a phrase.  A score is 1 minus the edit cost per phrase token
    (a pinyin syllable or a word): a wrong, missing or extra syllable costs 1, a near one less
    (``kit``/``kid`` 0.33)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Phrases with Chinese characters, compared by toneless pinyin syllables.
    min_score_han: float = Field(default=DEFAULT_MIN_SCORE_HAN, gt=0.0, le=1.0)
    #: The same for phrases of at most :data:`SHORT_PHRASE_SYLLABLES` syllables.
    min_score_han_short: float = Field(default=DEFAULT_MIN_SCORE_HAN_SHORT, gt=0.0, le=1.0)
    #: Phrases of Latin words, compared word by word.
    min_score_latin: float = Field(default=DEFAULT_MIN_SCORE_LATIN, gt=0.0, le=1.0)
    #: A match must end on a heard token at most this far from the phrase's last token: the
    #: distinctive end of a phrase (小凯, kitt) must be heard, and a match never ends inside the
    #: command.
    max_end_distance: float = Field(default=DEFAULT_MAX_END_DISTANCE, ge=0.0, le=1.0)
    #: Fold zh/z, ch/c, sh/s, n/l and back/front nasal finals before comparing pinyin.
    fuzzy_pinyin: bool = True


class WakeSettings(BaseModel):
    """A session's wake settings (``start``/``configure``; defaults under ``wake:`` in config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phrases: tuple[str, ...] = Field(default=(), max_length=MAX_WAKE_PHRASES)
    mode: WakeMode = WakeMode.OFF
    #: After a turn that was only the wake phrase, the next turn starting within this many ms of
    #: audio counts as woken.
    follow_up_ms: int = Field(default=DEFAULT_FOLLOW_UP_MS, ge=0, le=600_000)
    #: A wake phrase whose words were heard with a lower confidence (their lowest) does not wake;
    #: applies to finals of ``words: true`` sessions on an engine that times words; 0: off.
    min_confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    match: WakeMatchParams = WakeMatchParams()

    @field_validator("phrases")
    @classmethod
    def _phrases_are_matchable(cls, phrases: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_checked_phrase(phrase) for phrase in phrases)

    @model_validator(mode="after")
    def _phrases_when_on(self) -> WakeSettings:
        if self.mode is not WakeMode.OFF and not self.phrases:
            raise ValueError(f"wake mode {self.mode} needs at least one phrase")
        return self


def _checked_phrase(phrase: str) -> str:
    """A phrase as configured, stripped; refused when it could never be heard or never be shown."""
    stripped = phrase.strip()
    shown = quoted(phrase)
    if not 1 <= len(stripped) <= MAX_WAKE_PHRASE_CHARS:
        raise ValueError(f"wake phrase {shown} must have 1-{MAX_WAKE_PHRASE_CHARS} characters")
    if not stripped.isprintable():
        raise ValueError(f"wake phrase {shown} has a control, format or separator character")
    if not tokenize(stripped):
        raise ValueError(f"wake phrase {shown} has no letter, digit or Chinese character to listen for")
    return stripped


@dataclass(frozen=True)
class WakeMatch:
    """A wake phrase found at the start of a text.

    ``phrase`` is the configured phrase that matched (the first one, when repeated), ``heard`` the
    words written for it (all repeats), ``rest`` the text after it and the punctuation and spaces
    that followed it.
    """

    phrase: str
    heard: str
    rest: str
    score: float
    repeats: int = 1

    @property
    def alone(self) -> bool:
        """The text is the wake phrase and nothing else (so far, for an interim)."""
        return not self.rest


class WakeDetector(ABC):
    """Finds a configured wake phrase at the start of a text."""

    @abstractmethod
    def detect(self, text: str) -> WakeMatch | None:
        """The wake phrase(s) at the start of ``text`` and what follows them, or ``None``."""


@dataclass(frozen=True)
class _Phrase:
    text: str
    keys: tuple[str, ...]
    min_score: float
    window: int  # heard tokens worth looking at: the phrase's plus the insertions the score allows


@dataclass(frozen=True)
class _Found:
    phrase: _Phrase
    score: float
    end: int  # character offset just past the last heard token of the match
    repeats: int


class PinyinWakeDetector(WakeDetector):
    """Wake phrases matched by sound: pinyin syllables for Chinese, words for Latin script.

    Deterministic, and the phrases are tokenised once, when the settings are made; a text costs
    one tokenisation of its first few characters and a small edit-distance table per phrase.
    """

    def __init__(self, settings: WakeSettings) -> None:
        params = settings.match
        self._fuzzy = params.fuzzy_pinyin
        self._max_end_distance = params.max_end_distance
        self._phrases = tuple(self._phrase(text, params) for text in settings.phrases)
        self._window = max((phrase.window for phrase in self._phrases), default=0)

    def _phrase(self, text: str, params: WakeMatchParams) -> _Phrase:
        tokens = tokenize(text, fuzzy=self._fuzzy)
        keys = tuple(token.key for token in tokens)
        if not any(token.han for token in tokens):
            min_score = params.min_score_latin
        elif len(keys) <= SHORT_PHRASE_SYLLABLES:
            min_score = params.min_score_han_short
        else:
            min_score = params.min_score_han
        extra = math.floor((1.0 - min_score) * len(keys) / REPEATED_TOKEN_COST + 1e-9)
        return _Phrase(text, keys, min_score, len(keys) + extra)

    def detect(self, text: str) -> WakeMatch | None:
        start = skip_separators(text, 0)
        first = self._find(text, start)
        if first is None:
            return None
        end, repeats = first.end, first.repeats
        while repeats < MAX_REPEATS:
            again = self._find(text, skip_separators(text, end))
            if again is None:
                break
            end, repeats = again.end, repeats + again.repeats
        return WakeMatch(phrase=first.phrase.text, heard=text[start:end], rest=text[skip_separators(text, end):],
                         score=round(first.score, 3), repeats=repeats)

    def _find(self, text: str, position: int) -> _Found | None:
        """The best-scoring phrase heard at ``position`` (the first configured one on a tie)."""
        heard = tokenize(text, position, limit=self._window, fuzzy=self._fuzzy)
        if not heard:
            return None
        best: _Found | None = None
        for phrase in self._phrases:
            found = self._match(phrase, heard)
            if found is not None and (best is None or found.score > best.score):
                best = found
        return best

    def _match(self, phrase: _Phrase, heard: list[Token]) -> _Found | None:
        keys = phrase.keys
        if tuple(token.key for token in heard[:len(keys)]) == keys:
            return _Found(phrase, 1.0, heard[len(keys) - 1].end, 1)
        if len(keys) == 1 and not heard[0].han:
            glued = _glued_repeats(heard[0].key, keys[0])
            if glued:
                return _Found(phrase, 1.0, heard[0].end, glued)
        budget = (1.0 - phrase.min_score) * len(keys)
        cost, count = _align(keys, tuple(token.key for token in heard[:phrase.window]), self._max_end_distance, budget)
        score = 1.0 - cost / len(keys)
        if count == 0 or score < phrase.min_score:
            return None
        return _Found(phrase, score, heard[count - 1].end, 1)


def _glued_repeats(word: str, key: str) -> int:
    """How many times ``word`` is ``key`` written without spaces ("ABCABC" for "ABC"; 0 if not).

    Engines that put no space between Latin letters (the tone model) glue a repeated one-word
    phrase into one word."""
    count, remainder = divmod(len(word), len(key))
    return count if count >= 2 and not remainder and word == key * count else 0


def _align(phrase: tuple[str, ...], heard: tuple[str, ...], max_end_distance: float,
           budget: float) -> tuple[float, int]:
    """Cheapest reading of the whole phrase as ``heard[:count]``; returns ``(cost, count)``.

    Edit distance over tokens: a missing or extra token costs 1 (an extra one that repeats the token
    before it :data:`REPEATED_TOKEN_COST`), a substituted one its normalised letter distance.
    ``heard[count - 1]`` must stand for the phrase's last token, at most ``max_end_distance`` from
    it, so "你好小姐" or "你好小朋友" never read as 你好小凯 missing its 凯.  Ties go to the shorter
    reading, which leaves more of the command.  ``count`` is 0 when no reading qualifies; the
    table stops as soon as a whole row costs more than ``budget`` (costs only grow downwards), so
    a text that is not a wake phrase costs a few rows, not the whole table.
    """
    width = len(heard)
    inserted = [1.0] + [REPEATED_TOKEN_COST if column > 1 and heard[column - 1] == heard[column - 2] else 1.0
                        for column in range(1, width + 1)]
    previous = [0.0] * (width + 1)
    for column in range(1, width + 1):
        previous[column] = previous[column - 1] + inserted[column]
    last = len(phrase)
    ends = [math.inf] * (width + 1)
    for row, key in enumerate(phrase, 1):
        current = [float(row)] + [0.0] * width
        for column in range(1, width + 1):
            distance = _distance(key, heard[column - 1])
            diagonal = previous[column - 1] + distance
            current[column] = min(previous[column] + 1.0, current[column - 1] + inserted[column], diagonal)
            if row == last and distance <= max_end_distance:
                ends[column] = diagonal
        if min(current) > budget:
            return math.inf, 0
        previous = current
    best = min(range(1, width + 1), key=lambda column: (ends[column], column), default=0)
    return (ends[best], best) if best and ends[best] < math.inf else (math.inf, 0)


@lru_cache(maxsize=65536)
def _distance(first: str, second: str) -> float:
    return 0.0 if first == second else Levenshtein.normalized_distance(first, second)


def wake_hotwords(settings: WakeSettings, hotwords: tuple[Hotword, ...] = ()) -> tuple[Hotword, ...]:
    """``hotwords`` plus the wake phrases they do not already name, at the default boost.

    A session's wake phrases are biased for on engines that apply hotwords (the onnxruntime
    SenseVoice beam search); the client's own entry for a phrase, with its boost, wins.  With wake
    detection off nothing is added.
    """
    if settings.mode is WakeMode.OFF:
        return hotwords
    named = {hotword.text for hotword in hotwords}
    return hotwords + tuple(Hotword(phrase, DEFAULT_BOOST) for phrase in dict.fromkeys(settings.phrases)
                            if phrase not in named)
