"""Build the configured ASR engine, refusing configurations that cannot run as asked."""

from __future__ import annotations

from kitt_stt.asr.engine import AsrEngine
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.providers import check_profile_covers_segments
from kitt_stt.asr.sense_voice_model import ModelError, load_sense_voice_model
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine
from kitt_stt.config.schema import AppConfig, Engine, Provider
from kitt_stt.models.registry import resolve_model


def build_engine(config: AppConfig) -> AsrEngine:
    """Resolve and validate the model, then construct its engine.

    ``asr.engine: onnxruntime`` (default) runs SenseVoice on our onnxruntime pipeline (CPU,
    CUDA, TensorRT; greedy or hotword beam search).  ``asr.engine: sherpa`` uses sherpa-onnx,
    the reference implementation, which is CPU and greedy only here.
    """
    asr = config.asr
    resolved = resolve_model(asr.model, config.models)
    model = load_sense_voice_model(resolved.directory, prefer_int8=asr.provider is Provider.CPU)
    if asr.engine is Engine.ONNXRUNTIME:
        check_profile_covers_segments(asr, config.vad.max_segment_ms)
        return OrtSenseVoiceEngine(model, kind=resolved.kind, config=asr)
    if asr.provider is not Provider.CPU:
        raise ModelError(
            f"asr.provider={asr.provider.value} with asr.engine=sherpa: sherpa-onnx runs SenseVoice on the CPU "
            "only (it silently falls back to CPU for 'cuda' and terminates for TensorRT); use "
            "asr.engine: onnxruntime for GPU execution"
        )
    if asr.decoding.method != "greedy":
        raise ModelError("asr.decoding.method=beam needs asr.engine: onnxruntime; sherpa-onnx decodes SenseVoice "
                         "greedily only")
    return SherpaSenseVoiceEngine(model, kind=resolved.kind, num_threads=asr.num_threads)
