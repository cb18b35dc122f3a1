"""Voice activity per seat: a speech detector's decisions on 20 ms frames -> speech segments.

The detector (``vad.engine``: webrtcvad or Silero VAD, behind the cabin front end; see
:mod:`.detector`) says whether each frame is speech; this module turns those decisions into segments.

A small explicit state machine (:class:`VadState`).  In ``SILENCE`` the last ``preroll_ms`` of
audio sit in a ring, so when speech is confirmed the segment starts *before* the frames that
confirmed it and the first syllable is never cut.  Speech is confirmed when ``start_ms`` of the
last ``start_window_ms`` were voiced (start hysteresis) and ends after ``silence_ms`` of
continuous non-speech (stop hysteresis), or at ``max_segment_ms`` (forced split; speech goes on
in a new segment), or when the client says so.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from kitt_stt.audio.detector import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, SpeechDetector
from kitt_stt.audio.engines import new_detector
from kitt_stt.config.schema import VadConfig
from kitt_stt.str_enum import StrEnum

__all__ = ["FRAME_MS", "FRAME_SAMPLES", "SAMPLE_RATE", "EndReason", "SpeechAudio", "SpeechEnded", "SpeechStarted",
           "VadEvent", "VadSegmenter", "VadState"]


class VadState(StrEnum):
    SILENCE = "silence"
    SPEECH = "speech"


class EndReason(StrEnum):
    SILENCE = "silence"
    CLIENT = "client"
    MAX_DURATION = "max_duration"
    FINALIZE = "finalize"
    STOP = "stop"


@dataclass(frozen=True)
class SpeechStarted:
    """Speech confirmed; ``preroll`` is the audio of the segment so far (pre-roll included).
    ``continued``: the segment goes on from one just split at ``max_segment_ms``, not new speech."""

    audio_ms: int
    preroll: np.ndarray
    continued: bool = False


@dataclass(frozen=True)
class SpeechAudio:
    samples: np.ndarray
    voiced: bool = True


@dataclass(frozen=True)
class SpeechEnded:
    end_ms: int
    reason: EndReason


VadEvent = SpeechStarted | SpeechAudio | SpeechEnded


class VadSegmenter:
    """Feed 20 ms int16 frames, get segment events back, in order."""

    def __init__(self, config: VadConfig, detector: SpeechDetector | None = None) -> None:
        self._detector = detector or new_detector(config)
        self._start_frames = max(1, config.start_ms // FRAME_MS)
        window_frames = max(self._start_frames, config.start_window_ms // FRAME_MS)
        self._window = deque[bool](maxlen=window_frames)
        self._silence_frames = max(1, config.silence_ms // FRAME_MS)
        self._max_frames = max(1, config.max_segment_ms // FRAME_MS)
        self._preroll = deque[np.ndarray](maxlen=max(1, config.preroll_ms // FRAME_MS) + window_frames)
        self.state = VadState.SILENCE
        self.client_held = False
        self._frames_seen = 0
        self._skipped_samples = 0  # audio the server dropped (rate limit): on the clock, never heard
        self._segment_frames = 0
        self._trailing_silence = 0
        self._last_voiced_end_ms = 0

    @property
    def audio_ms(self) -> int:
        """Audio time of this seat's stream: ms of audio received so far (dropped audio included,
        so the clock stays the client's)."""
        return (self._frames_seen * FRAME_SAMPLES + self._skipped_samples) * 1000 // SAMPLE_RATE

    def skip(self, samples: int) -> None:
        """Advance the clock over audio that was received but not processed."""
        self._skipped_samples += samples

    @property
    def decision_lag_samples(self) -> int:
        """How far each decision trails the frame it comes with (the front end's filter delay):
        where the segment is cut at a pause must be taken back by this much."""
        return self._detector.delay_samples

    @property
    def buffered_bytes(self) -> int:
        return sum(frame.nbytes for frame in self._preroll) + self._detector.nbytes

    @property
    def detector(self) -> SpeechDetector:
        return self._detector

    def process(self, frame: np.ndarray) -> list[VadEvent]:
        return self.decided(frame, self._detector.is_speech(frame))

    def decided(self, frame: np.ndarray, voiced: bool) -> list[VadEvent]:
        """The events of ``frame`` given its detector's decision (made here or by the batch thread)."""
        self._frames_seen += 1
        if self.state is VadState.SILENCE:
            return self._in_silence(frame, voiced)
        return self._in_speech(frame, voiced)

    def _in_silence(self, frame: np.ndarray, voiced: bool) -> list[VadEvent]:
        self._preroll.append(frame)
        self._window.append(voiced)
        if sum(self._window) < self._start_frames:
            return []
        first_voiced = len(self._window) - list(self._window).index(True)
        return [self._start(self.audio_ms - first_voiced * FRAME_MS)]

    def _in_speech(self, frame: np.ndarray, voiced: bool) -> list[VadEvent]:
        self._segment_frames += 1
        events: list[VadEvent] = [SpeechAudio(frame, voiced)]
        if voiced:
            self._trailing_silence = 0
            self._last_voiced_end_ms = self.audio_ms
        else:
            self._trailing_silence += 1
        if self._trailing_silence >= self._silence_frames and not self.client_held:
            events.append(self._end(EndReason.SILENCE))
        elif self._segment_frames >= self._max_frames:
            held = self.client_held
            events.append(self._end(EndReason.MAX_DURATION))
            if voiced or held:  # speech goes on: open the next segment right away, no pre-roll needed
                self.client_held = held  # a client-held segment's continuation stays held
                events.append(self._start(self.audio_ms, continued=True))
        return events

    def _start(self, speech_ms: int, continued: bool = False) -> SpeechStarted:
        preroll = np.concatenate(list(self._preroll)) if self._preroll else np.zeros(0, np.int16)
        self._preroll.clear()
        self._window.clear()
        self.state = VadState.SPEECH
        self._segment_frames = preroll.shape[0] // FRAME_SAMPLES
        self._trailing_silence = 0
        self._last_voiced_end_ms = self.audio_ms
        return SpeechStarted(audio_ms=max(0, speech_ms), preroll=preroll, continued=continued)

    def _end(self, reason: EndReason) -> SpeechEnded:
        self.state = VadState.SILENCE
        self.client_held = False
        self._window.clear()
        end_ms = self.audio_ms if reason is not EndReason.SILENCE else self._last_voiced_end_ms
        return SpeechEnded(end_ms=end_ms, reason=reason)

    def client_start(self) -> list[VadEvent]:
        """Client says speech started: open a segment now and hold it until the client ends it."""
        self.client_held = True
        if self.state is VadState.SPEECH:
            return []
        return [self._start(self.audio_ms)]

    def refuse_start(self) -> None:
        """The segment just opened was not admitted (a segment-start budget or decode cap is
        reached): back to silence, so the audio until the next start is not part of any segment."""
        self.state = VadState.SILENCE
        self.client_held = False
        self._window.clear()

    def force_end(self, reason: EndReason) -> list[VadEvent]:
        """End the open segment now (client ``vad stop``, ``finalize``, ``close``)."""
        self.client_held = False
        if self.state is VadState.SILENCE:
            return []
        return [self._end(reason)]

    def reset(self, detector: bool = True) -> None:
        """Drop buffered audio (seat closed); ``detector=False`` when the detector is not ours to
        touch (the batch thread's, which drops it with the seat's stream)."""
        self._preroll.clear()
        self._window.clear()
        if detector:
            self._detector.reset()
