"""Whisper on sherpa-onnx's ``OfflineRecognizer`` (greedy, CPU): the reference our engine is checked
against (``asr.engine: sherpa``, or ``onnxruntime`` for Whisper; ours is ``asr/ort_whisper.py``).

Whisper decodes autoregressively, so unlike CTC its cost grows with the text as well as the audio,
and it reads at most 30 s at a time (``asr/factory.py`` refuses configurations that could ask more).
sherpa-onnx fixes the language per recognizer, so one is built lazily per language a session
asks for ("auto" lets Whisper detect it); each costs one more copy of the model in memory
(measured here: 280-320 MB of RSS each for base), so at most ``max_recognizers`` are kept (an
LRU, ``asr/recognizer_cache.py``), built outside any lock other decodes need. ``tail_paddings``
is the silence (in 10 ms feature frames) appended so Whisper sees the end of speech: too little
(300) and it repeats phrases when speech ends abruptly, as chunks do; 700 was as accurate as
sherpa's default 1000 for 21 % less work (docs/models.md).

With "auto" and a set of allowed languages (``asr.auto_languages`` or the session's
``languages``), the language is detected first by our own restricted language step
(``asr/whisper_language.py``, once per segment) and the segment decodes with that language's
recognizer, so detection never picks a language outside the set. The language step is built on
its first use (``LazyDetector``): with one allowed language, or without "auto", it never is.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sherpa_onnx

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo, StageTimer
from kitt_stt.asr.language import LanguageGuess, LazyDetector
from kitt_stt.asr.recognizer_cache import LruCache
from kitt_stt.asr.text import strip_annotations
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import LONGEST_AUDIO_MS, WhisperModel

SAMPLE_RATE = 16000
log = logging.getLogger(__name__)


class SherpaWhisperEngine(AsrEngine):
    def __init__(self, model: WhisperModel, kind: str, num_threads: int = 1, tail_paddings: int = 700,
                 task: str = "transcribe", max_recognizers: int = 2,
                 detector: Callable[[], WhisperLanguageDetector] | None = None) -> None:
        self._model = model
        self._detector = LazyDetector(detector) if detector is not None and len(model.languages) > 2 else None
        self._num_threads = num_threads
        self._tail_paddings = tail_paddings
        self._task = task
        self._recognizers: LruCache[str, sherpa_onnx.OfflineRecognizer] = LruCache(max_recognizers, self._build)
        self.info = EngineInfo(name=model.name, kind=kind, provider="cpu", languages=model.languages,
                               hotwords=False, longest_input_ms=LONGEST_AUDIO_MS)

    def _recognizer(self, language: str) -> sherpa_onnx.OfflineRecognizer:
        if language not in self._model.languages:  # sherpa-onnx exits the process on an unknown language
            raise ValueError(f"language {language!r} is not supported by {self._model.name}")
        return self._recognizers.get(language)

    def _build(self, language: str) -> sherpa_onnx.OfflineRecognizer:
        return sherpa_onnx.OfflineRecognizer.from_whisper(
            encoder=str(self._model.encoder_path),
            decoder=str(self._model.decoder_path),
            tokens=str(self._model.tokens_path),
            language="" if language == "auto" else language,
            task=self._task,
            tail_paddings=self._tail_paddings,
            num_threads=self._num_threads,
            provider="cpu",
            decoding_method="greedy_search",
        )

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        timer = timer or StageTimer()
        results: list[AsrResult] = []
        for request in requests:  # sherpa-onnx decodes Whisper streams one at a time anyway
            with timer.stage("language"):
                guess = self._language(request)
            recognizer = self._recognizer(request.options.language if guess is None else guess.lang)
            with timer.stage("features"):
                stream = recognizer.create_stream()
                stream.accept_waveform(SAMPLE_RATE, request.samples.astype(np.float32) / 32768.0)
            with timer.stage("decode"):
                recognizer.decode_stream(stream)
            with timer.stage("postprocess"):
                result = _read_result(stream.result)
                results.append(result if guess is None else
                               dataclasses.replace(result, lang=guess.lang, lang_probability=guess.probability))
        return results

    def _language(self, request: AsrRequest) -> LanguageGuess | None:
        """The restricted detection's choice for an "auto" request with allowed languages; None
        when the request names its language or sets no restriction (Whisper then detects alone)."""
        options = request.options
        if options.language != "auto" or not options.languages or self._detector is None:
            return None
        detector = self._detector
        return options.detected_language(request.samples,
                                         lambda audio: detector.get().detect(audio, options.languages))


def _read_result(result: Any) -> AsrResult:
    """Whisper's tokens are byte-level: one token may hold half of a Thai or Korean character, and
    sherpa-onnx's binding raises UnicodeDecodeError when asked for such a token (measured: 21 of 37
    prefixes of one English clip decoded with language auto). The text joins all bytes and is
    valid unless decoding stopped inside a character; then there is nothing valid to return."""
    try:
        text = strip_annotations(result.text)
    except UnicodeDecodeError:
        log.warning("Whisper stopped inside a multi-byte character; returning empty text")
        return AsrResult(text="", lang=result.lang or None)
    try:
        tokens = list(result.tokens)
    except UnicodeDecodeError:
        tokens = []
    return AsrResult(text=text, tokens=tokens, lang=result.lang or None)
