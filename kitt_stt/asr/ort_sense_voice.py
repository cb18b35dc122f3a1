"""SenseVoice on our own onnxruntime pipeline: CPU, CUDA or TensorRT; greedy or hotword beam search.

Why not sherpa-onnx here: for SenseVoice it decodes greedily only (beam search, hotwords and
TensorRT terminate the process), hides the logits, and fixes language and ITN per recognizer.
This engine reproduces sherpa-onnx's front end and greedy decoding exactly (same fbank options,
LFR 7/6 with centred window and repeated edges, CMVN from the model's metadata, greedy CTC over
``x_length + 4`` frames, first four tokens = language, emotion, event, ITN tag, timestamps
``0.06 * (frame - 4)``), takes language and ITN per request, batches streams of different
lengths with padding, and reuses fbank frames of a growing segment across decodes.

With "auto" and allowed languages, frame 0 (the language query's output) is restricted to the
allowed languages' tags (``asr/language.py``); once the segment's language is decided (not merely
guessed early), its later decodes pass that language explicitly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from kitt_stt.asr.ctc import CtcResult, HotwordTrie, PieceIndex, beam_search, greedy, tokenize_hotwords
from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, DecodeOptions, EngineInfo, StageTimer
from kitt_stt.asr.features import FeatureStream, apply_lfr, log_mel
from kitt_stt.asr.language import LanguageGuess, restricted_guess
from kitt_stt.asr.providers import check_active, check_available, profile_longest_ms, provider_chain
from kitt_stt.asr.recognizer_cache import LruCache
from kitt_stt.asr.sense_voice_model import LANGUAGES, SenseVoiceModel, read_tokens
from kitt_stt.asr.text import strip_tags, tag_value
from kitt_stt.asr.token_timing import timed_tokens
from kitt_stt.asr.words import TimedWord, words_from_tokens
from kitt_stt.config.schema import AsrConfig, Provider
from kitt_stt.hotwords import Hotword
from kitt_stt.quote import quoted

log = logging.getLogger(__name__)

PREFIX_FRAMES = 4
FRAME_MS = 60  # one LFR frame: 6 fbank frames of 10 ms
SECONDS_PER_FRAME = FRAME_MS / 1000.0


class InputTooLong(ValueError):
    """Audio longer than the TensorRT optimisation profile allows."""


@dataclass(frozen=True)
class _Prepared:
    features: np.ndarray  # (T, 560) after LFR + CMVN
    language: int
    text_norm: int


class OrtSenseVoiceEngine(AsrEngine):
    def __init__(self, model: SenseVoiceModel, kind: str, config: AsrConfig) -> None:
        meta = model.metadata
        raw_tokens = read_tokens(model.tokens_path)
        vocabulary = {token: index for index, token in enumerate(raw_tokens)}
        self._pieces = PieceIndex(vocabulary)
        self._tokens = [token.replace("▁", " ") for token in raw_tokens]  # as sherpa-onnx's symbol table
        self._neg_mean = np.array([float(v) for v in meta["neg_mean"].split(",")], dtype=np.float32)
        self._inv_stddev = np.array([float(v) for v in meta["inv_stddev"].split(",")], dtype=np.float32)
        self._language_ids = {name: int(meta[f"lang_{name}"]) for name in LANGUAGES}
        self._language_tags = {name: vocabulary[f"<|{name}|>"] for name in LANGUAGES
                               if f"<|{name}|>" in vocabulary}  # what frame 0 can read
        self._with_itn, self._without_itn = int(meta["with_itn"]), int(meta["without_itn"])
        self._method = config.decoding.method
        self._beam = config.decoding.max_active_paths
        self._max_frames = config.tensorrt.profile_max_frames if config.provider is Provider.TENSORRT else None
        # Clients choose hotword lists, so the tries are bounded; sessions change them rarely.
        self._tries: LruCache[tuple[Hotword, ...], HotwordTrie] = LruCache(config.hotword_cache_size,
                                                                          self._build_trie)
        if config.provider is not Provider.CPU:
            check_available(config.provider)
        options = ort.SessionOptions()
        options.intra_op_num_threads = config.num_threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = model.model_path
        if config.provider is Provider.TENSORRT and config.tensorrt.ep_context_model is not None:
            path = config.tensorrt.ep_context_model  # prebuilt by `kitt-stt trt build`
        self._session = ort.InferenceSession(str(path), options, providers=provider_chain(config))
        check_active(self._session, config.provider)
        self._input_names = [item.name for item in self._session.get_inputs()][:4]
        self.info = EngineInfo(name=model.name, kind=kind, provider=config.provider.value, languages=LANGUAGES,
                               words=True, longest_input_ms=profile_longest_ms(config))

    def new_feature_stream(self) -> FeatureStream | None:
        return FeatureStream()

    def prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        if hotwords:
            self._tries.get(hotwords)

    # ----- decoding ----------------------------------------------------------------------------

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        timer = timer or StageTimer()
        with timer.stage("features"):
            prepared = [self._prepare(request) for request in requests]
        with timer.stage("decode"):
            logits, lengths = self._run(prepared)
        with timer.stage("postprocess"):
            return [self._result(logits[i], lengths[i], requests[i]) for i in range(len(requests))]

    def _prepare(self, request: AsrRequest) -> _Prepared:
        stream = request.features
        frames = stream.frames_for(request.samples) if stream is not None else log_mel(request.samples)
        features = (apply_lfr(frames) + self._neg_mean) * self._inv_stddev
        if self._max_frames is not None and features.shape[0] > self._max_frames:
            raise InputTooLong(
                f"{features.shape[0]} LFR frames ({features.shape[0] * SECONDS_PER_FRAME:.1f} s) exceed the TensorRT "
                f"profile maximum of {self._max_frames}; raise asr.tensorrt.profile_max_frames or lower "
                "vad.max_segment_ms"
            )
        options = request.options
        language = self._language_ids.get(self._query_language(options), self._language_ids["auto"])
        text_norm = self._with_itn if options.use_itn else self._without_itn
        return _Prepared(features.astype(np.float32), language, text_norm)

    @staticmethod
    def _query_language(options: DecodeOptions) -> str:
        """What the language query is forced to: the language named, or for "auto" the segment's
        decision or the only allowed language. Before a decision the query runs unforced (frame 0
        copies a forced language, so forcing an early guess would make the decision repeat it) and
        ``_restrict_language`` masks its output to the guess."""
        if options.language != "auto":
            return options.language
        if len(options.languages) == 1:
            return options.languages[0]
        decided = options.segment_language.decided if options.segment_language is not None else None
        return decided.lang if decided is not None else "auto"

    def _run(self, prepared: list[_Prepared]) -> tuple[np.ndarray, list[int]]:
        count = len(prepared)
        longest = max(max(item.features.shape[0] for item in prepared), 1)
        x = np.zeros((count, longest, self._neg_mean.shape[0]), dtype=np.float32)  # sherpa pads with 0
        for index, item in enumerate(prepared):
            x[index, : item.features.shape[0]] = item.features
        lengths = np.array([item.features.shape[0] for item in prepared], dtype=np.int32)
        feeds = dict(zip(self._input_names, (
            x,
            lengths,
            np.array([item.language for item in prepared], dtype=np.int32),
            np.array([item.text_norm for item in prepared], dtype=np.int32),
        ), strict=True))
        (logits,) = self._session.run(None, feeds)[:1]
        return logits, [int(length) + PREFIX_FRAMES for length in lengths]

    def _restrict_language(self, logits: np.ndarray, request: AsrRequest) -> LanguageGuess | None:
        """For "auto" with allowed languages: the segment's language (detected from frame 0 when
        not yet decided), and frame 0 masked so only that language's tag can be read."""
        options = request.options
        if options.language != "auto" or not options.languages:
            return None
        frame = logits[0]
        # the language query reads this decode's audio, whatever the segment has so far
        guess = options.detected_language(
            request.samples, lambda _audio: restricted_guess(frame, self._language_tags, options.languages))
        masked = np.full_like(frame, -np.inf)
        tag = self._language_tags[guess.lang]
        masked[tag] = frame[tag]
        logits[0] = masked
        return guess

    def _result(self, logits: np.ndarray, length: int, request: AsrRequest) -> AsrResult:
        guess = self._restrict_language(logits, request)
        hotwords = request.options.hotwords
        if self._method == "beam" or hotwords:
            decoded = beam_search(logits, length, self._beam, self._tries.get(hotwords) if hotwords else None)
        else:
            decoded = greedy(logits, length)
        symbols = [self._tokens[token] for token in decoded.token_ids]
        body = symbols[PREFIX_FRAMES:]
        text = "".join(body)
        words: tuple[TimedWord, ...] = ()
        if request.options.words:  # only when asked: a softmax over the vocabulary per token
            words = body_words(logits, length, decoded, symbols)
        return AsrResult(
            text=strip_tags(text),
            tokens=body,
            timestamps=[round(SECONDS_PER_FRAME * (frame - PREFIX_FRAMES), 3)
                        for frame in decoded.frames[PREFIX_FRAMES:]],
            lang=tag_value(symbols[0]) if len(symbols) >= 3 else None,
            lang_probability=guess.probability if guess is not None else None,
            emotion=tag_value(symbols[1]) if len(symbols) >= 3 else None,
            event=tag_value(symbols[2]) if len(symbols) >= 3 else None,
            words=words,
        )

    def _build_trie(self, hotwords: tuple[Hotword, ...]) -> HotwordTrie:
        entries, unmatched = tokenize_hotwords(hotwords, self._pieces)
        if unmatched:  # one line per list: a list of 1000 unknown words once logged 1000 lines
            shown = ", ".join(quoted(text) for text in unmatched[:5])
            log.warning("%d of %d hotwords have no tokens in this model's vocabulary and are ignored: %s%s",
                        len(unmatched), len(hotwords), shown, ", …" if len(unmatched) > 5 else "")
        return HotwordTrie(entries)


def body_words(logits: np.ndarray, length: int, decoded: CtcResult, symbols: list[str]) -> tuple[TimedWord, ...]:
    """The timed words of a decode: its tokens after the query prefix, tags left out (the
    engine's word step, shared with ``utils/performance/words_bench.py`` so it times this code)."""
    tokens = timed_tokens(logits, length, decoded, symbols, PREFIX_FRAMES, FRAME_MS)
    return tuple(words_from_tokens(token for token in tokens if not _is_tag(token.text)))


def _is_tag(symbol: str) -> bool:
    """A SenseVoice ``<|...|>`` tag among the text tokens: no word (the text drops it too)."""
    return strip_tags(symbol) == "" and "<|" in symbol
