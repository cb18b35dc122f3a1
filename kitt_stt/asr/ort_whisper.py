"""Whisper on our own onnxruntime sessions (``asr.engine: ort``, the default): greedy decoding over our
export's encoder/decoder pair, on the CPU, CUDA or TensorRT (``asr/whisper_graphs.py``).

Why not only sherpa-onnx (``asr/sherpa_whisper.py``, kept as ``asr.engine: sherpa``, the
reference): it hides the encoder output and the logits, so detecting the language restricted to
the session's set costs a second encoder pass and a second copy of the model, and it fixes the
language per recognizer, one more model copy per language. Here one copy serves every language.

The decode reproduces sherpa-onnx's greedy search, with one deliberate difference: the frames
after the audio hold Whisper's own silence level (``asr.whisper.padding: whisper``), not
sherpa-onnx's zeros, on which whisper-base repeats itself on short pieces ("Front Front Front";
``padding: zeros`` reproduces the reference, for parity checks; docs/models.md). The same front
end and tail length, the prompt ``<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>``
run at once, the argmax of the last logits until ``<|endoftext|>``, at most 6 tokens per second of audio (and half the
text context), the language for "auto" without a set read as sherpa-onnx reads it (the first step
on ``<|startoftranscript|>`` alone, the best language token); the text is the tokens' bytes
joined (specials left out) and ``strip_annotations``. Where the bytes end inside a character
the incomplete one is dropped (sherpa-onnx's binding then raises, and that engine returns "").

One encoder pass per decode: with "auto" the first step on ``<|startoftranscript|>`` over the
decode's own encoder output gives the language scores (restricted to the allowed set, with
``asr.whisper.language_bias`` added, as ``asr/language.py`` and the separate step did) and the
no-speech probability, and the same output feeds the decode. The one exception: when a segment's
language is decided on more audio than the piece (a chunk closed before the decision point, so
the piece starts later), the language step reads the segment's start on these same sessions.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo, StageTimer
from kitt_stt.asr.language import LanguageGuess, LazyDetector, restricted_guess
from kitt_stt.asr.text import strip_annotations
from kitt_stt.asr.whisper_graphs import WhisperGraphs, padded_mel, silence_level, whisper_log_mel
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import LONGEST_AUDIO_MS, WhisperModel
from kitt_stt.asr.whisper_timing import speech_bounds_ms, whisper_words
from kitt_stt.config.schema import AsrConfig, WhisperPadding

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
    guess: LanguageGuess | None  # the restricted detection's choice, when it made one
    no_speech: float | None  # P(<|nocaptions|>) at the first step, when it ran alone
    # with words: each token's probability, and the alignment rows (heads, tokens + 1, audio frames)
    probabilities: list[float] = field(default_factory=list)
    scores: np.ndarray | None = None
    audio_frames: int = 0  # encoder frames holding audio, not the tail padding
    speech_ms: tuple[int, int] = (0, 0)  # where the piece's loud frames begin and end


class _FirstStep:
    """The decoder's first step on ``<|startoftranscript|>`` alone over one decode's encoder
    output, run once when something asks for it (the language or the no-speech probability)."""

    def __init__(self, graphs: WhisperGraphs, cross: tuple[np.ndarray, np.ndarray]) -> None:
        self._graphs, self._cross = graphs, cross
        self._logits: np.ndarray | None = None

    @property
    def logits(self) -> np.ndarray:
        if self._logits is None:
            graphs = self._graphs
            cache = graphs.empty_cache()
            self._logits, _, _ = graphs.step([graphs.tokens.sot], (cache, cache), self._cross, 0)
        return self._logits

    @property
    def ran(self) -> bool:
        return self._logits is not None

    def no_speech(self) -> float:
        logits = self.logits.astype(np.float64)
        weights = np.exp(logits - logits.max())
        return float(weights[self._graphs.tokens.no_speech] / weights.sum())


class OrtWhisperEngine(AsrEngine):
    def __init__(self, model: WhisperModel, kind: str, config: AsrConfig,
                 detector: Callable[[WhisperGraphs], WhisperLanguageDetector] | None = None) -> None:
        self._model = model
        self._graphs = WhisperGraphs(model, config)
        self._special = self._graphs.tokens
        self._text = read_token_bytes(str(model.tokens_path))
        self._tail_paddings = config.whisper.tail_paddings
        self._pad_as_whisper = config.whisper.padding is WhisperPadding.WHISPER
        self._task = self._special.translate if config.whisper.task == "translate" else self._special.transcribe
        self._bias = {code: offset for code, offset in config.whisper.language_bias.items()
                      if code in self._special.languages}
        graphs = self._graphs
        self._detector = (LazyDetector(lambda: detector(graphs))
                          if detector is not None and len(model.languages) > 2 else None)
        self.info = EngineInfo(name=model.name, kind=kind, provider=config.provider.value, languages=model.languages,
                               hotwords=False, words=graphs.aligns, longest_input_ms=LONGEST_AUDIO_MS)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        timer = timer or StageTimer()
        results = []
        for request in requests:  # one at a time: each decode's length is its own
            with timer.stage("features"):
                mel = whisper_log_mel(request.samples)
            decoded = self._decode(mel, request, timer)  # its stages: encoder, language, greedy steps
            with timer.stage("postprocess"):
                results.append(self._result(decoded))
        return results

    def _language(self, request: AsrRequest, first: _FirstStep) -> tuple[str, LanguageGuess | None]:
        """The language to decode in, and the restricted detection's guess when one was made."""
        options = request.options
        if options.language != "auto" or len(self._model.languages) <= 2:
            return options.language, None
        if not options.languages:  # as sherpa-onnx: the best of all the model's languages
            scores = {code: float(first.logits[token]) for code, token in self._special.languages.items()}
            return max(scores, key=lambda code: scores[code]), None

        segment = options.segment_language
        enough = segment.min_samples if segment is not None else 0

        def detect(audio: np.ndarray) -> LanguageGuess:
            if self._detector is None or _reads(request.samples, audio, enough):  # audio this decode reads
                logits = first.logits.copy()
                for code, offset in self._bias.items():
                    logits[self._special.languages[code]] += offset
                return restricted_guess(logits, self._special.languages, options.languages)
            return self._detector.get().detect(audio, options.languages)  # the segment's start, same sessions

        guess = options.detected_language(request.samples, detect)
        return guess.lang, guess

    def _decode(self, mel: np.ndarray, request: AsrRequest, timer: StageTimer) -> GreedyDecode:
        graphs = self._graphs
        with timer.stage("decode"):
            fill = silence_level(mel) if self._pad_as_whisper else 0.0
            cross = graphs.encode(padded_mel(mel, self._tail_paddings, fill))
        first = _FirstStep(graphs, cross)
        with timer.stage("language"):
            language, guess = self._language(request, first)
        words = request.options.words and graphs.aligns
        with timer.stage("decode"):
            decoded = self._greedy(mel, cross, language, words=words)
        # where the speech lies only matters to the words: not computed for every interim
        return dataclasses.replace(decoded, guess=guess, no_speech=first.no_speech() if first.ran else None,
                                   speech_ms=speech_bounds_ms(request.samples) if words else (0, 0))

    def _greedy(self, mel: np.ndarray, cross: tuple[np.ndarray, np.ndarray], language: str,
                words: bool) -> GreedyDecode:
        """Greedy search as sherpa-onnx runs it; with ``words`` also each token's probability and
        the alignment heads' rows for ``asr/whisper_timing.py``."""
        special, graphs = self._special, self._graphs
        code: str | None = None
        prompt = [special.sot]
        if len(self._model.languages) > 2:  # multilingual: sot, language, task
            if language not in special.languages:
                raise ValueError(f"language {language!r} is not supported by {self._model.name}")
            code = language
            prompt += [special.languages[language], self._task]
        prompt.append(special.no_timestamps)
        audio_frames = mel.shape[1] // 2
        logits, cache, qk = graphs.step(prompt, (graphs.empty_cache(), graphs.empty_cache()), cross, 0, words)
        rows = [qk[:, -1, :audio_frames]] if qk is not None else []  # the row that predicts the first token
        offset = len(prompt)
        limit = min(int(mel.shape[1] / 100.0 * TOKENS_PER_SECOND), special.text_ctx // 2)
        tokens: list[int] = []
        probabilities: list[float] = []
        best = int(np.argmax(logits))
        while len(tokens) < limit and best != special.eot:
            tokens.append(best)
            if words:
                probabilities.append(_text_probability(logits, best, special.eot))
            logits, cache, qk = graphs.step([best], cache, cross, offset, words)
            if qk is not None:
                rows.append(qk[:, 0, :audio_frames])
            offset += 1
            if offset >= special.text_ctx - 1:
                break
            best = int(np.argmax(logits))
        if not words:
            return GreedyDecode(tokens, code, None, None)
        kept = [index for index, token in enumerate(tokens) if token in self._text]  # specials have no words
        return GreedyDecode(tokens, code, None, None, probabilities=[probabilities[index] for index in kept],
                            scores=np.stack([rows[index] for index in [*kept, len(tokens)]], axis=1),
                            audio_frames=audio_frames)

    def _result(self, decoded: GreedyDecode) -> AsrResult:
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
        guess = decoded.guess
        words = () if decoded.scores is None else whisper_words(pieces, decoded.probabilities, decoded.scores,
                                                                 decoded.audio_frames, decoded.speech_ms)
        return AsrResult(text=strip_annotations(text), tokens=tokens, lang=decoded.language,
                         lang_probability=guess.probability if guess is not None else None,
                         no_speech_probability=decoded.no_speech, words=words)


def _text_probability(logits: np.ndarray, token: int, eot: int) -> float:
    """``token``'s softmax probability among the text tokens (those before ``<|endoftext|>``)."""
    text = logits[:eot].astype(np.float64)
    top = text.max()
    return float(np.exp(text[token] - top) / np.exp(text - top).sum()) if token < eot else 0.0


def _reads(piece: np.ndarray, audio: np.ndarray, enough: int) -> bool:
    """Whether the language asked of ``audio`` (the segment so far, which may have grown since the
    piece was cut) can be read from ``piece``'s own first step: the piece is the start of the audio
    and holds all of it or at least ``enough`` (what the segment's decision reads). A piece that
    starts later (after a closed chunk) differs from the segment's first samples; a first chunk
    shorter than the decision point would decide on less audio than the segment has."""
    if audio.shape[0] < piece.shape[0] or not np.array_equal(audio[: piece.shape[0]], piece):
        return False
    return piece.shape[0] >= min(audio.shape[0], enough)
