"""The speech-detector interface: one 20 ms frame in, "is this speech?" out, whatever the engine.

The segmenter (:mod:`.vad`) owns the state machine (pre-roll, start and stop hysteresis, forced
splits); a detector owns only the per-frame decision and whatever state its engine needs per
seat. Every detector hears the cabin front end first (:mod:`.frontend`): the high-pass filter,
then, after the engine's own decision, the noise-floor gate, so that no engine keeps a segment
open on stationary noise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from kitt_stt.audio.frontend import HighPassFilter, NoiseFloor, level_db
from kitt_stt.config.schema import VadConfig

SAMPLE_RATE = 16000
FRAME_MS = 20
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
#: after speech that stood out from the noise, the engine's own word counts this long: the gate is
#: there for noise, and must not cut short the hangover that webrtcvad keeps across a word's stop
#: closures and short gaps (in a quiet room the gate then changes nothing) ...
GATE_HOLD_FRAMES = 100 // FRAME_MS
#: ... where speech means this many frames in a row above the gate that the engine also calls speech:
#: a lone loud frame of noise (brown noise fluctuates slowly), or a bump the engine itself rejects,
#: must not hand the next 100 ms to an engine that hears noise as speech
GATE_HOLD_AFTER_FRAMES = 3


class SpeechDetector(ABC):
    """Per-seat speech decision on consecutive 20 ms int16 frames."""

    def __init__(self, config: VadConfig, default_gate_db: float) -> None:
        self._highpass = HighPassFilter(config.highpass_hz, FRAME_SAMPLES) if config.highpass_hz else None
        self._gate_db = default_gate_db if config.noise_gate_db is None else config.noise_gate_db
        self._floor = NoiseFloor(config.noise_window_ms, FRAME_MS) if self._gate_db else None
        # the filter's first output frames are its start-up transient (quieter than the input): kept
        # out of the noise floor, or the floor would sit below the noise for a whole window
        self._settle_frames = -(-self._highpass.delay_samples // FRAME_SAMPLES) if self._highpass else 0
        self._heard_frames = 0
        self._above_run = 0  # frames in a row above the gate and voiced
        self._gate_hold = 0  # frames the engine's decision still counts after such a run ended
        #: the last frame's level over the noise floor in dB (for the benchmark and tracing)
        self.last_margin_db = 0.0

    def is_speech(self, frame: np.ndarray) -> bool:
        heard = self.hear(frame)
        return self.judge(heard, self._engine_says_speech(heard))

    def hear(self, frame: np.ndarray) -> np.ndarray:
        """The front end's filter: what the engine hears of ``frame`` (float64, int16 scale)."""
        return self._highpass.process(frame) if self._highpass is not None else frame.astype(np.float64)

    @staticmethod
    def hear_together(detectors: list[SpeechDetector], frames: list[np.ndarray]) -> list[np.ndarray]:
        """:meth:`hear` for one frame of each of several detectors of one configuration at once."""
        filters = [detector._highpass for detector in detectors]
        if any(highpass is None for highpass in filters):
            return [detector.hear(frame) for detector, frame in zip(detectors, frames, strict=True)]
        return HighPassFilter.process_together(filters, frames)  # type: ignore[arg-type]

    def judge(self, heard: np.ndarray, voiced: bool) -> bool:
        """The frame's decision: the engine's word ``voiced`` on ``heard``, held against the noise
        floor. Split from :meth:`is_speech` so that an engine scored elsewhere (a batch of seats,
        :mod:`.silero_batch`) reaches the same decision as one scored here."""
        self._heard_frames += 1
        if self._floor is None:
            return voiced
        if self._heard_frames <= self._settle_frames:
            return False
        level = level_db(heard)
        self.last_margin_db = level - self._floor.update(level)
        if self.last_margin_db >= self._gate_db:
            self._above_run = self._above_run + 1 if voiced else 0  # speech: loud, and the engine agrees
            if self._above_run >= GATE_HOLD_AFTER_FRAMES:
                self._gate_hold = GATE_HOLD_FRAMES
            return voiced
        self._above_run = 0
        if self._gate_hold:
            self._gate_hold -= 1
            return voiced
        return False

    @property
    def delay_samples(self) -> int:
        """Each decision is about the audio that ended this many samples ago (the high-pass filter's
        delay; the engines themselves decide on what they have heard up to now)."""
        return self._highpass.delay_samples if self._highpass is not None else 0

    @abstractmethod
    def _engine_says_speech(self, frame: np.ndarray) -> bool:
        """The engine's decision on one filtered frame (float64, int16 scale)."""

    def reset(self) -> None:
        """Forget everything heard (the seat is closed)."""
        if self._highpass is not None:
            self._highpass.reset()
        if self._floor is not None:
            self._floor.reset()
        self._heard_frames = 0
        self._above_run = 0
        self._gate_hold = 0

    @property
    def nbytes(self) -> int:
        return (self._highpass.nbytes if self._highpass is not None else 0) + (
            self._floor.nbytes if self._floor is not None else 0)
