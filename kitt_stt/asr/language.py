"""Language identification restricted to a set, decided once per segment and kept for a turn.

Why restricted: an in-car product speaks a known set of languages (``asr.auto_languages``, by
default zh and en). Whisper detects among all 99 of its languages, and on short commands it
reads English and Mandarin as Thai or Japanese; SenseVoice's language query picks among its
five. Both score every language at once, so the scores of languages outside the set are dropped
and the best of the rest wins, with its probability renormalised over the set (as Whisper's own
``detect_language`` does over all language tokens).

Why once per segment: chunks and interims of one segment are decoded separately; detecting on
each would let the pieces of one sentence flip between zh and en and, for Whisper, pay an
encoder pass per piece. The first decode of a segment that has at least ``min_samples`` of audio
so far (1.8 s) decides, reading the segment's audio from its start (not just that decode's piece, which
may be a 300 ms chunk); before that, pieces use the turn's language, or one early guess that
also sets the turn's (so at most two detections per segment; a short segment keeps its guess).
The decision replaces the segment's own early guess as the turn's language without the switch
margin: it read more of the same speech (the margin would let 0.7 s outvote 1.5 s).

Why per turn: a turn keeps the language its first segment decided unless a later segment's
evidence is clearly stronger (its probability exceeds the turn's by ``switch_margin``). A turn's
language outside a segment's allowed set (a ``configure`` narrowed ``languages`` mid-turn) is not
reused: that segment detects within its own set.
Decodes run on scheduler worker threads, so the state here is guarded by locks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")

DEFAULT_SWITCH_MARGIN = 0.25
# 1.8 s of 16 kHz audio: a segment shorter so far does not decide. The VAD's 300 ms pre-roll plus
# the 1.5 s of speech the Whisper step reads (the defaults; a session derives it from vad.preroll_ms
# and asr.whisper.language_window_ms): on less, whisper-base's zh/en scores still swing
# (en_go_forward_ten_meters read zh on 0.9-1.1 s of speech and en from 1.3 s on, lid_report's
# setting), and deciding at 1 s made the README's English example come back zh now and then.
DEFAULT_MIN_SAMPLES = 28800


@dataclass(frozen=True)
class LanguageGuess:
    lang: str
    probability: float  # among the allowed languages only


def restricted_guess(logits: np.ndarray, token_ids: Mapping[str, int], allowed: Sequence[str]) -> LanguageGuess:
    """The best of ``allowed`` by ``logits`` (one score per vocabulary entry), with its softmax
    probability over the allowed languages' tokens only; every other entry is masked out."""
    codes = [code for code in allowed if code in token_ids]
    if not codes:
        raise ValueError(f"none of {', '.join(allowed)} is a language this model can detect")
    scores = np.array([float(logits[token_ids[code]]) for code in codes], dtype=np.float64)
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    best = int(np.argmax(weights))
    return LanguageGuess(codes[best], round(float(weights[best]), 4))


class LazyDetector(Generic[T]):
    """A language detector built on its first use, once, under a lock (decodes run on several
    worker threads). Engines keep one because detection runs only for "auto" with at least two
    allowed languages, and a detector is a second copy of a model (267 MB for whisper-base):
    a server that never needs it should not pay for it."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._built: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        built = self._built
        if built is None:
            with self._lock:
                if self._built is None:
                    self._built = self._build()
                built = self._built
        return built


class TurnLanguage:
    """The language a turn's segments decode in, once its first segment decided one."""

    def __init__(self) -> None:
        self._guess: LanguageGuess | None = None
        self._lock = threading.Lock()

    @property
    def guess(self) -> LanguageGuess | None:
        with self._lock:
            return self._guess

    def settle(self, guess: LanguageGuess, switch_margin: float = DEFAULT_SWITCH_MARGIN,
               allowed: Sequence[str] = (), provisional: LanguageGuess | None = None) -> LanguageGuess:
        """The turn's language after a segment detected ``guess``: the first guess sets it; a
        different language replaces it only with clearly stronger evidence, or when the turn's is
        outside the segment's ``allowed`` set (empty: any), or when the turn's is the same
        segment's own early guess (``provisional``, made on less audio than the decision)."""
        with self._lock:
            current = self._guess
            if current is None or current is provisional or not _within(current, allowed) or (
                    guess.lang != current.lang and guess.probability >= current.probability + switch_margin):
                self._guess = current = guess
            return current

    def segment(self, switch_margin: float = DEFAULT_SWITCH_MARGIN, min_samples: int = DEFAULT_MIN_SAMPLES,
                audio: Callable[[], np.ndarray] | None = None, allowed: Sequence[str] = ()) -> SegmentLanguage:
        return SegmentLanguage(self, switch_margin, min_samples, audio, allowed)


def _within(guess: LanguageGuess, allowed: Sequence[str]) -> bool:
    return not allowed or guess.lang in allowed


class SegmentLanguage:
    """One segment's language: detected by the first decode long enough to tell, then reused by
    the segment's other decodes (chunks, interims, the final's tail), which detect nothing."""

    def __init__(self, turn: TurnLanguage | None = None, switch_margin: float = DEFAULT_SWITCH_MARGIN,
                 min_samples: int = DEFAULT_MIN_SAMPLES, audio: Callable[[], np.ndarray] | None = None,
                 allowed: Sequence[str] = ()) -> None:
        self._turn = turn
        self._allowed = tuple(allowed)  # the languages this segment may decode in (empty: any)
        self._switch_margin = switch_margin
        self._min_samples = min_samples
        # the segment's audio so far (a growing buffer's view: read from a worker thread, it is a
        # valid prefix whatever the event loop appends meanwhile); None: each decode's own piece
        self._audio = audio
        self._guess: LanguageGuess | None = None
        self._latest: LanguageGuess | None = None  # before the decision: what the pieces use
        self._early: LanguageGuess | None = None  # this segment's own early guess, if it made one
        self._lock = threading.Lock()  # held while detecting, so concurrent pieces detect once

    @property
    def guess(self) -> LanguageGuess | None:
        """The language decided for the segment, else the last short piece's, else None."""
        with self._lock:
            return self._guess or self._latest

    @property
    def min_samples(self) -> int:
        """How much of the segment's audio the decision reads (less: an early guess)."""
        return self._min_samples

    @property
    def decided(self) -> LanguageGuess | None:
        """The segment's decision only (not an early guess): an engine may force its language
        query to it, but forcing an early guess would make the decision repeat it."""
        with self._lock:
            return self._guess

    def resolve(self, piece: np.ndarray, detect: Callable[[np.ndarray], LanguageGuess]) -> LanguageGuess:
        """The segment's language for a decode of ``piece``; ``detect`` runs the restricted
        detection on the audio given, only when nothing decided the segment's language yet."""
        with self._lock:
            if self._guess is not None:
                return self._guess
            turn_guess = self._turn.guess if self._turn is not None else None
            if turn_guess is not None and not _within(turn_guess, self._allowed):
                turn_guess = None
            audio = self._audio() if self._audio is not None else piece
            if audio.shape[0] < self._min_samples:
                # too short to decide on: the turn's language if it has one, else one guess that
                # the segment's pieces share until it has enough audio (a short segment keeps it)
                if turn_guess is not None:
                    self._latest = turn_guess
                elif self._latest is None:  # the turn's first words: their language is the turn's until clearly not
                    self._early = detect(audio)
                    self._latest = self._settled(self._early)
                return self._latest
            self._guess = self._settled(detect(audio), provisional=self._early)
            return self._guess

    def _settled(self, guess: LanguageGuess, provisional: LanguageGuess | None = None) -> LanguageGuess:
        if self._turn is None:
            return guess
        return self._turn.settle(guess, self._switch_margin, self._allowed, provisional)
