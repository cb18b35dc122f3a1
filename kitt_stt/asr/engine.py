"""The engine interface every recogniser implements.

An engine takes a batch of utterances (int16 PCM at 16 kHz plus per-request options) and
returns text, tokens, timestamps and language for each.  Engines are called from scheduler
worker threads, never from the event loop, so ``decode_batch`` may block.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from kitt_stt.asr.features import FeatureStream
from kitt_stt.asr.language import LanguageGuess, SegmentLanguage
from kitt_stt.asr.words import TimedWord
from kitt_stt.hotwords import Hotword


@dataclass(frozen=True)
class DecodeOptions:
    """Per-request settings, taken from the session when its segment began."""

    language: str = "auto"
    use_itn: bool = True
    hotwords: tuple[Hotword, ...] = ()
    # with language "auto": the languages detection may choose (empty: all the model knows), and the
    # segment's decision shared by its decodes (None: each decode detects on its own audio)
    languages: tuple[str, ...] = ()
    segment_language: SegmentLanguage | None = field(default=None, compare=False)
    # word timings and confidence: computed only when asked, so decodes without them pay nothing
    words: bool = False

    def detected_language(self, piece: np.ndarray, detect: Callable[[np.ndarray], LanguageGuess]) -> LanguageGuess:
        """The language to decode ``piece`` in: ``detect`` (on the audio it is given) once per
        segment when the request has a segment, else on the piece itself. With one allowed
        language there is nothing to detect: it is the answer, and no detector needs to exist."""
        if len(self.languages) == 1:  # the segment still records it: its probability is reported
            detect = _sole_language(self.languages[0])
        if self.segment_language is None:
            return detect(piece)
        return self.segment_language.resolve(piece, detect)

    def language_probability(self) -> float | None:
        """The detected language's probability, once the segment's language was detected."""
        guess = self.segment_language.guess if self.segment_language is not None else None
        return guess.probability if guess is not None else None


def _sole_language(lang: str) -> Callable[[np.ndarray], LanguageGuess]:
    guess = LanguageGuess(lang, 1.0)
    return lambda _audio: guess


@dataclass(frozen=True)
class AsrRequest:
    samples: np.ndarray  # int16, 16 kHz, mono
    options: DecodeOptions = DecodeOptions()
    features: FeatureStream | None = None  # the segment's incremental fbank, for engines that use one


@dataclass(frozen=True)
class AsrResult:
    text: str
    tokens: list[str] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    lang: str | None = None
    lang_probability: float | None = None  # of ``lang`` among the allowed languages, when it was detected
    emotion: str | None = None
    event: str | None = None
    # with ``DecodeOptions.words`` on an engine that can time words: each word of ``text`` (times
    # relative to the request's first sample); a text's confidence is derived from them
    # (``asr.words.overall_confidence``)
    words: tuple[TimedWord, ...] = ()
    # Whisper on onnxruntime: P(<|nocaptions|>) at the first step, where the step ran for the language
    no_speech_probability: float | None = None


@dataclass(frozen=True)
class EngineInfo:
    name: str
    kind: str
    provider: str
    languages: tuple[str, ...] = ("auto",)
    hotwords: bool = True  # False: the engine cannot bias decoding, so sessions asking for it are refused
    words: bool = False  # True: the engine times words and scores them from its own posteriors
    # the longest audio one decode reads whole (None: any length); beyond it an engine clips or
    # fails, so every path cuts its audio within it (uploads: server/file_transcription.py)
    longest_input_ms: int | None = None


class StageTimer:
    """Collects (stage, start, end) ``time.perf_counter`` readings of one engine call, so the
    scheduler can trace feature preparation, decoding and post-processing separately without
    engines knowing about the tracer."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, float, float]] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages.append((name, start, time.perf_counter()))


class AsrEngine(ABC):
    info: EngineInfo

    @abstractmethod
    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        """Decode each request; the i-th result belongs to the i-th request."""

    def new_feature_stream(self) -> FeatureStream | None:
        """An incremental front end for one segment, if this engine can use one."""
        return None

    def prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        """Build and cache whatever decoding with ``hotwords`` needs (e.g. a token trie).

        Called off the event loop when a session's start/configure arrives, so decodes never pay
        for it. Engines that cannot bias decoding, or keep nothing per hotword list, do nothing.
        """
        return None

    def warm_up(self, options: DecodeOptions = DecodeOptions()) -> None:
        """Run one tiny decode so the first real request does not pay for lazy initialisation;
        ``options`` are the sessions' defaults (their language is the recognizer to build)."""
        self.decode_batch([AsrRequest(np.zeros(16000, dtype=np.int16), options)])
