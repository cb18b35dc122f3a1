"""Build the configured ASR engine, refusing configurations that cannot run as asked."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo, StageTimer
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.ort_whisper import OrtWhisperEngine
from kitt_stt.asr.providers import check_available, check_profile_covers_segments, profile_longest_ms
from kitt_stt.asr.sense_voice_model import LANGUAGES, ModelError, load_sense_voice_model
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_graphs import WhisperGraphs
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import LONGEST_AUDIO_MS, load_whisper_model
from kitt_stt.config.schema import AppConfig, AsrConfig, Engine, Provider
from kitt_stt.models.registry import resolve_model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnginePlan:
    """A resolved, validated model and configuration; ``build()`` constructs the engine.

    Validation is quick and runs before the server starts (a broken model or an impossible
    setting fails start-up with a message). Construction can be slow (a TensorRT engine build
    takes minutes on an Orin), so the server runs it after ``/healthz`` already answers.
    """

    info: EngineInfo  # what the engine will report (languages already narrowed to asr.languages)
    construct: Callable[[], AsrEngine]

    def build(self) -> AsrEngine:
        engine = self.construct()
        engine.info = dataclasses.replace(engine.info, languages=self.info.languages)
        return engine


class PendingEngine(AsrEngine):
    """Stands in for the engine while it is being built: sessions are refused until it is ready,
    so nothing decodes on it."""

    def __init__(self, info: EngineInfo) -> None:
        self.info = info

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        raise RuntimeError("the ASR engine is still being built")


def build_engine(config: AppConfig) -> AsrEngine:
    return plan_engine(config).build()


def plan_engine(config: AppConfig) -> EnginePlan:
    """Resolve and validate the model, and say how to construct its engine.

    ``asr.engine: ort`` (default) runs our onnxruntime pipelines (CPU, CUDA, TensorRT) for every
    model: SenseVoice greedy or with hotword beam search, Whisper greedy (``asr/ort_whisper.py``).
    ``onnxruntime`` runs ours for SenseVoice and sherpa-onnx for Whisper (as before 0.6.1);
    ``sherpa`` uses sherpa-onnx, the reference implementation (CPU, greedy), for both.
    """
    asr = config.asr
    resolved = resolve_model(asr.model, config.models)
    construct: Callable[[], AsrEngine]
    if resolved.kind == "whisper":
        info, construct = _plan_whisper(config, resolved.directory, resolved.kind)
    else:
        model = load_sense_voice_model(resolved.directory, prefer_int8=asr.provider is Provider.CPU)
        if asr.engine is not Engine.SHERPA:
            check_profile_covers_segments(asr, config.vad.max_segment_ms)
            if asr.provider is not Provider.CPU:
                check_available(asr.provider)
            context = asr.tensorrt.ep_context_model
            if asr.provider is Provider.TENSORRT and context is not None and not context.is_file():
                raise ModelError(f"asr.tensorrt.ep_context_model {context} does not exist: run `kitt-stt trt build` "
                                 "first, or leave it unset to use (or build) the keyed engine cache")
            info = EngineInfo(model.name, resolved.kind, asr.provider.value, LANGUAGES, hotwords=True, words=True,
                              longest_input_ms=profile_longest_ms(asr))
            construct = partial(OrtSenseVoiceEngine, model, kind=resolved.kind, config=asr)
        else:
            _require_cpu_greedy(config, "SenseVoice", instead="; use asr.engine: onnxruntime")
            info = EngineInfo(model.name, resolved.kind, "cpu", LANGUAGES, hotwords=False)
            construct = partial(SherpaSenseVoiceEngine, model, kind=resolved.kind, num_threads=asr.num_threads,
                                max_recognizers=asr.max_recognizers,
                                detector=partial(OrtSenseVoiceEngine, model, kind=resolved.kind, config=asr))
    _check_live_decodes_fit(config, info)
    if asr.hotwords and not info.hotwords:
        raise ModelError(f"asr.hotwords needs hotword biasing, which {info.kind} on sherpa-onnx does not do; "
                         "use a SenseVoice model with asr.engine: onnxruntime, or clear asr.hotwords")
    return EnginePlan(dataclasses.replace(info, languages=_allowed_languages(info, asr)), construct)


def _allowed_languages(info: EngineInfo, asr: AsrConfig) -> tuple[str, ...]:
    """The entries of ``asr.languages`` the model knows, in config order.

    Sessions may pick only those (the connection refuses others), which bounds the
    per-language recognizers a client can make the engine build. Unknown entries are left out
    rather than refused so one list serves several models (whisper-base has no ``yue``).
    """
    known = info.languages
    allowed = tuple(code for code in dict.fromkeys(asr.languages) if code in known)
    left_out = [code for code in asr.languages if code not in known]
    if left_out:
        log.info("asr.languages: %s left out, not languages of %s", ", ".join(left_out), info.name)
    if not allowed:
        raise ModelError(f"asr.languages: none of {', '.join(asr.languages)} is a language of {info.name}; "
                         f"it knows: {', '.join(known)}")
    if asr.language not in allowed:
        raise ModelError(f"asr.language={asr.language!r} is not one of this model's languages: {', '.join(known)}")
    return allowed


def _require_cpu_greedy(config: AppConfig, family: str, instead: str = "") -> None:
    """sherpa-onnx runs on the CPU with greedy search only; ``instead`` says what to use otherwise."""
    asr = config.asr
    if asr.provider is not Provider.CPU:
        raise ModelError(f"asr.provider={asr.provider.value}: sherpa-onnx runs {family} on the CPU only here (it "
                         f"silently falls back to CPU for 'cuda' and terminates for TensorRT){instead}")
    if asr.decoding.method != "greedy":
        raise ModelError(f"asr.decoding.method=beam: sherpa-onnx decodes {family} greedily only{instead}")


def _plan_whisper(config: AppConfig, directory: Path, kind: str) -> tuple[EngineInfo, Callable[[], AsrEngine]]:
    """Whisper on our onnxruntime sessions (any provider) or on sherpa-onnx (CPU); greedy either way.
    The restricted language step runs on the onnxruntime engine's own sessions, and on sessions of
    its own beside sherpa-onnx (built on first use)."""
    asr = config.asr
    options = asr.whisper
    on_sherpa = asr.engine is not Engine.ORT
    if on_sherpa:
        _require_cpu_greedy(config, "Whisper", instead="; use asr.engine: ort")
    elif asr.decoding.method != "greedy":
        raise ModelError("asr.decoding.method=beam: Whisper is decoded greedily only here")
    elif asr.provider is Provider.TENSORRT and asr.tensorrt.ep_context_model is not None:
        raise ModelError("asr.tensorrt.ep_context_model is a SenseVoice engine; leave it unset for Whisper")
    elif asr.provider is not Provider.CPU:
        check_available(asr.provider)
    whisper = load_whisper_model(directory)
    provider = "cpu" if on_sherpa else asr.provider.value
    info = EngineInfo(whisper.name, kind, provider, whisper.languages, hotwords=False,
                      words=whisper.aligns and not on_sherpa, longest_input_ms=LONGEST_AUDIO_MS)
    detector = partial(WhisperLanguageDetector, whisper, num_threads=asr.num_threads,
                       window_frames=options.language_window_ms // 10, pad_frames=options.language_pad_frames,
                       bias=options.language_bias)
    if on_sherpa:
        return info, partial(SherpaWhisperEngine, whisper, kind=kind, num_threads=asr.num_threads,
                             tail_paddings=options.tail_paddings, task=options.task,
                             max_recognizers=asr.max_recognizers, detector=detector)

    def shared(graphs: WhisperGraphs) -> WhisperLanguageDetector:
        return detector(graphs=graphs)

    return info, partial(OrtWhisperEngine, whisper, kind=kind, config=asr, detector=shared)


def _check_live_decodes_fit(config: AppConfig, info: EngineInfo) -> None:
    """The longest decode the live path asks for must fit what the engine reads whole
    (``info.longest_input_ms``), or the engine would clip it. Uploads need no setting: their
    pieces are cut to fit (server/file_transcription.py); a TensorRT profile is checked by
    :func:`check_profile_covers_segments`, which needs every whole segment to fit."""
    asr, limit = config.asr, info.longest_input_ms
    longest, setting = config.vad.max_segment_ms, "vad.max_segment_ms"
    if not asr.naive and asr.chunk_pause_ms and asr.max_chunk_ms < longest:
        longest, setting = asr.max_chunk_ms, "asr.max_chunk_ms (the longest a chunk or a final's tail gets)"
    if limit is not None and longest > limit:
        raise ModelError(f"{info.kind} reads at most {limit} ms per decode, but this configuration can ask for "
                         f"{longest} ms: lower {setting}")
