"""The open segment of a seat: its audio, its decode options and its interim cadence."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from kitt_stt.asr.engine import DecodeOptions
from kitt_stt.audio.buffer import PcmBuffer
from kitt_stt.config.schema import InterimConfig
from kitt_stt.pipeline.chunks import ChunkTracker
from kitt_stt.turnsense.model import TurnPrediction


@dataclass
class Segment:
    segment_id: int
    start_ms: int
    options: DecodeOptions
    interim_enabled: bool
    buffer: PcmBuffer = field(default_factory=PcmBuffer)
    chunks: ChunkTracker = field(default_factory=lambda: ChunkTracker(pause_frames=0, max_chunk_samples=1 << 62))
    closed: bool = False
    end_ms: int = 0
    end_reason: str = ""
    started_at: float = field(default_factory=time.perf_counter)
    ended_at: float = 0.0
    last_interim_audio_ms: int | None = None
    last_interim_wall: float = 0.0
    last_interim_text: str = ""
    last_interim_shown_ms: int = -1  # the audio time of the last interim sent
    # the end-of-turn prediction started when a pause closed the last chunk; the segment's end
    # uses it if no speech came after (so the commit need not wait for the model)
    pause_prediction: asyncio.Future[TurnPrediction] | None = None
    origin_ms: int = 0  # the buffer's first sample (pre-roll included) on the seat's clock

    def wants_interim(self, audio_ms: int, cadence: InterimConfig) -> bool:
        """First interim after ``start_ms`` of speech, then at most every ``min_interval_ms``.

        Both audio time (no new audio -> no interim) and wall time (a client sending faster
        than real time does not get more decodes per second) must have advanced.
        """
        if self.closed or not self.interim_enabled:  # the session's choice; interim.enabled is its default
            return False
        if audio_ms - self.start_ms < cadence.start_ms:
            return False
        if self.last_interim_audio_ms is None:
            return True
        interval = cadence.min_interval_ms
        return (audio_ms - self.last_interim_audio_ms >= interval
                and (time.perf_counter() - self.last_interim_wall) * 1000.0 >= interval)

    def show_interim(self, text: str, audio_ms: int) -> bool:
        """Whether an interim of ``text`` as of ``audio_ms`` goes out (and note it if so): not an
        empty one, not the same text again, and not one older than an interim already sent (with
        several decode workers a later interim can finish first; the older one would step back)."""
        if not text or text == self.last_interim_text or audio_ms <= self.last_interim_shown_ms:
            return False
        self.last_interim_text, self.last_interim_shown_ms = text, audio_ms
        return True

    def mark_interim_requested(self, audio_ms: int) -> None:
        self.last_interim_audio_ms = audio_ms
        self.last_interim_wall = time.perf_counter()
