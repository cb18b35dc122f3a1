"""The neural VAD's model, made ready before the service accepts a seat.

A seat builds its speech detector synchronously on the event loop, so the model must already be
on disk and loaded: ``kitt-stt serve`` (and ``models prepare``) resolve ``vad.model`` here,
installing the registry model on first start, and load it once, so that a missing or broken model
stops the start with a message instead of failing the first seat.
"""

from __future__ import annotations

from kitt_stt.asr.providers import ProviderError
from kitt_stt.asr.sense_voice_model import ModelError
from kitt_stt.audio.silero import load_silero
from kitt_stt.config.schema import AppConfig, VadEngine
from kitt_stt.models.registry import ResolvedModel, resolve_model


def resolve_vad_model(config: AppConfig) -> ResolvedModel | None:
    """The engine's model directory (installed if missing); None for an engine without a model."""
    if config.vad.engine is VadEngine.WEBRTC:
        return None
    return resolve_model(config.vad.model, config.models, setting="vad.model", directory_kind="vad")


def prepare_vad(config: AppConfig) -> AppConfig:
    """``config`` with ``vad.model`` pointing at the loaded model's directory."""
    resolved = resolve_vad_model(config)
    if resolved is None:
        return config
    try:
        load_silero(resolved.directory, config.vad.provider)
    except ProviderError as exc:  # asked for a GPU, would run on the CPU: refused, as asr.provider is
        raise ModelError(str(exc)) from None
    except Exception as exc:  # onnxruntime raises its own types for a truncated or foreign file
        raise ModelError(f"vad.model: cannot load {resolved.directory}: {exc}") from None
    return config.model_copy(update={"vad": config.vad.model_copy(update={"model": str(resolved.directory)})})
