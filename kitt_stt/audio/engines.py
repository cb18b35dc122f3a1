"""Which speech detector a seat gets (``vad.engine``)."""

from __future__ import annotations

from pathlib import Path

from kitt_stt.audio.detector import SpeechDetector
from kitt_stt.audio.silero import SileroDetector, load_silero
from kitt_stt.audio.webrtc import WebRtcDetector
from kitt_stt.config.schema import VadConfig, VadEngine


def new_detector(config: VadConfig) -> SpeechDetector:
    """The configured engine for one seat. A neural engine's ``vad.model`` must be a directory by
    now: ``kitt-stt serve`` resolves the registry name (installing it on first start) before any seat
    exists, so a seat never waits for a download."""
    if config.engine is VadEngine.WEBRTC:
        return WebRtcDetector(config)
    return SileroDetector(config, load_silero(Path(config.model), config.provider))
