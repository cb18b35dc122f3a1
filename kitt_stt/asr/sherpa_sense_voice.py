"""SenseVoice on sherpa-onnx's ``OfflineRecognizer`` (greedy CTC, CPU).

sherpa-onnx fixes language and ITN per recognizer, not per stream, so one recognizer is built
lazily for each (language, ITN) pair a session asks for; they share nothing but the file, so
each pair costs one more copy of the model in memory (small for the tone model; for SenseVoice
prefer one language per deployment). At most ``max_recognizers`` are kept (an LRU,
``asr/recognizer_cache.py``), built outside any lock other decodes need.  Only configurations
sherpa-onnx survives are ever passed to it: greedy search, ``provider="cpu"``, and a model
checked by ``sense_voice_model``.

sherpa-onnx hides the language query's scores, so "auto" with allowed languages detects first
with ``detector`` (our onnxruntime engine on the same model: frame 0 masked to the set, a second
pass, once per segment) and then decodes with the chosen language passed explicitly. That second
copy of the model is built on its first use: with one allowed language, or without "auto", never.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import sherpa_onnx

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, DecodeOptions, EngineInfo, StageTimer
from kitt_stt.asr.language import LanguageGuess, LazyDetector
from kitt_stt.asr.recognizer_cache import LruCache
from kitt_stt.asr.sense_voice_model import LANGUAGES, SenseVoiceModel
from kitt_stt.asr.text import strip_tags, tag_value

SAMPLE_RATE = 16000


class SherpaSenseVoiceEngine(AsrEngine):
    def __init__(self, model: SenseVoiceModel, kind: str, num_threads: int = 1, max_recognizers: int = 2,
                 detector: Callable[[], AsrEngine] | None = None) -> None:
        self._model = model
        self._detector = LazyDetector(detector) if detector is not None else None
        self._num_threads = num_threads
        self._recognizers: LruCache[tuple[str, bool], sherpa_onnx.OfflineRecognizer] = LruCache(
            max_recognizers, self._build)
        self.info = EngineInfo(name=model.name, kind=kind, provider="cpu", languages=LANGUAGES,
                               hotwords=False)

    def _recognizer(self, language: str, use_itn: bool) -> sherpa_onnx.OfflineRecognizer:
        if language not in LANGUAGES:  # sherpa-onnx exits the process on an unknown language
            raise ValueError(f"language {language!r} is not supported; use one of {', '.join(LANGUAGES)}")
        return self._recognizers.get((language, use_itn))

    def _build(self, key: tuple[str, bool]) -> sherpa_onnx.OfflineRecognizer:
        language, use_itn = key
        return sherpa_onnx.OfflineRecognizer.from_sense_voice(
            model=str(self._model.model_path),
            tokens=str(self._model.tokens_path),
            num_threads=self._num_threads,
            provider="cpu",
            decoding_method="greedy_search",
            language=language,
            use_itn=use_itn,
        )

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        timer = timer or StageTimer()
        results: list[AsrResult | None] = [None] * len(requests)
        groups: dict[tuple[str, bool], list[int]] = {}
        with timer.stage("language"):
            guesses = [self._language(request) for request in requests]
        for index, (request, guess) in enumerate(zip(requests, guesses, strict=True)):
            language = request.options.language if guess is None else guess.lang
            groups.setdefault((language, request.options.use_itn), []).append(index)
        for (language, use_itn), indices in groups.items():
            recognizer = self._recognizer(language, use_itn)
            streams = []
            with timer.stage("features"):  # sherpa-onnx computes the fbank as audio is accepted
                for index in indices:
                    stream = recognizer.create_stream()
                    samples = requests[index].samples.astype(np.float32) / 32768.0
                    stream.accept_waveform(SAMPLE_RATE, samples)
                    streams.append(stream)
            with timer.stage("decode"):
                recognizer.decode_streams(streams)
            with timer.stage("postprocess"):
                for index, stream in zip(indices, streams, strict=True):
                    result = stream.result
                    guess = guesses[index]
                    results[index] = AsrResult(
                        text=strip_tags(result.text),
                        tokens=list(result.tokens),
                        timestamps=[round(float(t), 3) for t in result.timestamps],
                        lang=tag_value(result.lang) if guess is None else guess.lang,
                        lang_probability=None if guess is None else guess.probability,
                        emotion=tag_value(result.emotion),
                        event=tag_value(result.event),
                    )
        return [result for result in results if result is not None]

    def _language(self, request: AsrRequest) -> LanguageGuess | None:
        """The restricted detection's choice for an "auto" request with allowed languages."""
        options = request.options
        if options.language != "auto" or not options.languages or self._detector is None:
            return None
        detector = self._detector
        query = DecodeOptions(language="auto", use_itn=options.use_itn, languages=options.languages)

        def detect(audio: np.ndarray) -> LanguageGuess:
            found = detector.get().decode_batch([AsrRequest(audio, query)])[0]
            if found.lang is None or found.lang_probability is None:
                raise RuntimeError("the language query gave no language")
            return LanguageGuess(found.lang, found.lang_probability)

        return options.detected_language(request.samples, detect)
