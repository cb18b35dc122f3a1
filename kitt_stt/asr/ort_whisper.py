"""Whisper on our own onnxruntime sessions (``asr.engine: onnxruntime``): greedy decoding over our
export's encoder/decoder pair, on the CPU, CUDA or TensorRT (``asr/whisper_graphs.py``).

Why not only sherpa-onnx (``asr/sherpa_whisper.py``, kept as ``asr.engine: sherpa``, the
reference): it hides the encoder output and the logits, so detecting the language restricted to
the session's set costs a second encoder pass and a second copy of the model, and it fixes the
language per recognizer, one more model copy per language. Here one copy serves every language.

The decode reproduces sherpa-onnx's greedy search: the same front end and tail padding, the
prompt ``<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>`` run at once, the argmax
of the last logits until ``<|endoftext|>``, at most 6 tokens per second of audio (and half the
text context), the language for "auto" without a set read as sherpa-onnx reads it (the first step
on ``<|startoftranscript|>`` alone, the best language token); the text is the tokens' bytes
joined (specials left out) and ``strip_annotations``. Where the bytes end inside a character
the incomplete one is dropped (sherpa-onnx's binding then raises, and that engine returns "").
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo, StageTimer
from kitt_stt.asr.language import LanguageGuess, LazyDetector
from kitt_stt.asr.text import strip_annotations
from kitt_stt.asr.whisper_graphs import WhisperGraphs, padded_mel, whisper_log_mel
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import LONGEST_AUDIO_MS, WhisperModel
from kitt_stt.config.schema import AsrConfig

log = logging.getLogger(__name__)

TOKENS_PER_SECOND = 6  # sherpa-onnx's bound on the text of one decode (a runaway repeat stops there)


def read_token_bytes(path: str) -> dict[int, bytes]:
    """``tokens.txt`` (``<base64 of the token's bytes> <id>``, text tokens only) -> id -> bytes."""
    table: dict[int, bytes] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            encoded, _, index = line.rstrip("\n").rpartition(" ")
            table[int(index)] = base64.b64decode(encoded)
    return table


@dataclass(frozen=True)
class GreedyDecode:
    """One decode's tokens and what its first step said."""

    tokens: list[int]
    language: str | None  # the language token's code in the prompt (None: an English-only model)


class OrtWhisperEngine(AsrEngine):
    def __init__(self, model: WhisperModel, kind: str, config: AsrConfig,
                 detector: Callable[[WhisperGraphs], WhisperLanguageDetector] | None = None) -> None:
        self._model = model
        self._graphs = WhisperGraphs(model, config)
        self._special = self._graphs.tokens
        self._text = read_token_bytes(str(model.tokens_path))
        self._tail_paddings = config.whisper.tail_paddings
        self._task = self._special.translate if config.whisper.task == "translate" else self._special.transcribe
        graphs = self._graphs
        self._detector = (LazyDetector(lambda: detector(graphs))
                          if detector is not None and len(model.languages) > 2 else None)
        self.info = EngineInfo(name=model.name, kind=kind, provider=config.provider.value,
                               languages=model.languages, hotwords=False, longest_input_ms=LONGEST_AUDIO_MS)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        timer = timer or StageTimer()
        results = []
        for request in requests:  # one at a time: each decode's length is its own
            with timer.stage("language"):
                guess = self._restricted_language(request)
            with timer.stage("features"):
                mel = whisper_log_mel(request.samples)
            with timer.stage("decode"):
                decoded = self._decode(mel, request.options.language if guess is None else guess.lang)
            with timer.stage("postprocess"):
                results.append(self._result(decoded, guess))
        return results

    def _restricted_language(self, request: AsrRequest) -> LanguageGuess | None:
        """The restricted detection's choice for an "auto" request with allowed languages; None
        when the request names its language or sets no restriction (Whisper then detects alone)."""
        options = request.options
        if options.language != "auto" or not options.languages or self._detector is None:
            return None
        detector = self._detector
        return options.detected_language(request.samples,
                                         lambda audio: detector.get().detect(audio, options.languages))

    def _decode(self, mel: np.ndarray, language: str) -> GreedyDecode:
        special, graphs = self._special, self._graphs
        cross = graphs.encode(padded_mel(mel, self._tail_paddings))
        code: str | None = None
        prompt = [special.sot]
        if len(self._model.languages) > 2:  # multilingual: sot, language, task
            if language == "auto":  # as sherpa-onnx: the first step alone, the best language token
                logits, _ = graphs.step([special.sot], (graphs.empty_cache(), graphs.empty_cache()), cross, 0)
                scores = {lang: float(logits[token]) for lang, token in special.languages.items()}
                language = max(scores, key=lambda lang: scores[lang])
            if language not in special.languages:
                raise ValueError(f"language {language!r} is not supported by {self._model.name}")
            code = language
            prompt += [special.languages[language], self._task]
        prompt.append(special.no_timestamps)
        logits, cache = graphs.step(prompt, (graphs.empty_cache(), graphs.empty_cache()), cross, 0)
        offset = len(prompt)
        limit = min(int(mel.shape[1] / 100.0 * TOKENS_PER_SECOND), special.text_ctx // 2)
        tokens: list[int] = []
        best = int(np.argmax(logits))
        while len(tokens) < limit and best != special.eot:
            tokens.append(best)
            logits, cache = graphs.step([best], cache, cross, offset)
            offset += 1
            if offset >= special.text_ctx - 1:
                break
            best = int(np.argmax(logits))
        return GreedyDecode(tokens, code)

    def _result(self, decoded: GreedyDecode, guess: LanguageGuess | None) -> AsrResult:
        pieces = [self._text[token] for token in decoded.tokens if token in self._text]
        raw = b"".join(pieces)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("Whisper stopped inside a multi-byte character; dropping the incomplete one")
            text = raw.decode("utf-8", errors="ignore")
        try:
            tokens = [piece.decode("utf-8") for piece in pieces]
        except UnicodeDecodeError:  # a token holding part of a character has no text of its own
            tokens = []
        return AsrResult(text=strip_annotations(text), tokens=tokens, lang=decoded.language,
                         lang_probability=guess.probability if guess is not None else None)
