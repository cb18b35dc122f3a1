"""Build the configured ASR engine, refusing configurations that cannot run as asked."""

from __future__ import annotations

from kitt_stt.asr.engine import AsrEngine
from kitt_stt.asr.sense_voice_model import ModelError, load_sense_voice_model
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine
from kitt_stt.config.schema import AppConfig, Provider
from kitt_stt.models.registry import resolve_model


def build_engine(config: AppConfig) -> AsrEngine:
    """Resolve and validate the model, then construct its engine (no inference yet)."""
    resolved = resolve_model(config.asr.model, config.models.cache_dir)
    if config.asr.provider is not Provider.CPU:
        raise ModelError(
            f"asr.provider={config.asr.provider.value}: the sherpa-onnx SenseVoice engine runs on the CPU "
            "only (sherpa-onnx silently falls back to CPU for 'cuda' and terminates for TensorRT); "
            "set asr.provider: cpu. GPU execution needs the onnxruntime SenseVoice engine "
            "(docs/deployment-gpu.md)"
        )
    model = load_sense_voice_model(resolved.directory)
    return SherpaSenseVoiceEngine(model, kind=resolved.kind, num_threads=config.asr.num_threads)
