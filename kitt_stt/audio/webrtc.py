"""webrtcvad as a speech detector: the engine that needs no model (and hears the tone test language)."""

from __future__ import annotations

import numpy as np
import webrtcvad

from kitt_stt.audio.detector import SAMPLE_RATE, SpeechDetector
from kitt_stt.config.schema import VadConfig

#: webrtcvad calls steady noise speech, so only the noise-floor gate lets its segments end in a car
DEFAULT_GATE_DB = 6.0


class WebRtcDetector(SpeechDetector):
    """webrtcvad's GMM decision (C, microseconds a frame; ``vad.aggressiveness`` 0..3)."""

    def __init__(self, config: VadConfig) -> None:
        super().__init__(config, DEFAULT_GATE_DB)
        self._vad = webrtcvad.Vad(config.aggressiveness)

    def _engine_says_speech(self, frame: np.ndarray) -> bool:
        pcm = np.clip(np.rint(frame), -32768, 32767).astype("<i2")
        return bool(self._vad.is_speech(pcm.tobytes(), SAMPLE_RATE))
