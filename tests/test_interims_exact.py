"""Interims never duplicate or reorder text (issue 19): an interim joins exactly the chunks that
were closed when its tail was taken. A chunk closed while the tail decodes covers the tail's own
audio, so joining it too wrote the same words twice (`打开车门打开车门` for the final `打开车门`).

The fault needs a chunk to close while an interim's decode is in flight, so decodes are slowed
(every batch 150 ms longer: tests/engine_wrappers.py) and several seats stream paused speech in real
time with interims on: one seat in a pipeline here, several over a real server's WebSocket.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.client.session import connect
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.eot import SilenceTimeoutPolicy
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.scheduler import InferenceScheduler
from tests.engine_wrappers import SlowDecodes
from tests.helpers import collect_until, commits, frames_of, of_type, run_server, send_pcm, tone_pcm

# Phrases with 400 ms pauses: each pause closes a chunk (chunk_pause_ms 200) without ending the
# segment (silence_ms 500), so a segment holds several chunks and an interim is due at each pause.
PHRASES = ("打开车门", "关窗", "ABC", "门窗")
SEATS = ("driver", "passenger", "rear left")
CONFIG: dict[str, Any] = {
    "asr": {"chunk_pause_ms": 200},
    "vad": {"silence_ms": 500},
    "interim": {"enabled": True, "start_ms": 200, "min_interval_ms": 200},
    "turn": {"wait_ms": 300, "model": None},
}


def paused_speech() -> bytes:
    return b"".join(tone_pcm(text, lead_ms=300 if index == 0 else 0, tail_ms=400)
                    for index, text in enumerate(PHRASES)) + bytes(32 * 800)


def assert_interims_lead_to_their_finals(frames: list[dict[str, Any]]) -> int:
    """Every interim is a beginning of its segment's final (no word twice, none out of order);
    returns how many interims there were."""
    finals = {f["segment_id"]: f["text"] for f in of_type(frames, "final")}
    interims = of_type(frames, "interim")
    for interim in interims:
        final = finals[interim["segment_id"]]
        assert final.startswith(interim["text"]), (interim, final)
    return len(interims)


@pytest.fixture(scope="module")
def tone_engine(tone_dir: Path) -> OrtSenseVoiceEngine:
    return OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone", AsrConfig())


async def test_an_interim_joins_only_the_chunks_closed_before_its_tail(tone_engine) -> None:
    config = AppConfig.model_validate(CONFIG)
    scheduler = InferenceScheduler(SlowDecodes(tone_engine), workers=1)
    scheduler.start()
    frames: list[dict[str, Any]] = []
    seats = [SeatPipeline(name, config, lambda: SessionSettings(interim=True), scheduler, SilenceTimeoutPolicy(300),
                          lambda frame: frames.append(frame.model_dump()), owner=name) for name in SEATS]
    try:
        started = time.monotonic()
        for index, frame in enumerate(frames_of(paused_speech())):  # every seat, in real time
            for seat in seats:
                seat.push_audio(np.frombuffer(frame, dtype="<i2"))
            await asyncio.sleep(max(0.0, started + (index + 1) * 0.02 - time.monotonic()))
        deadline = time.monotonic() + 15
        while len(commits(frames)) < len(SEATS):
            assert time.monotonic() < deadline, frames
            await asyncio.sleep(0.02)
    finally:
        for seat in seats:
            seat.close()
        scheduler.stop()
    for name in SEATS:
        [final] = of_type(frames, "final", name)
        assert final["text"] == "".join(PHRASES) and final["timing"]["chunks"] == len(PHRASES)
        assert assert_interims_lead_to_their_finals([f for f in frames if f.get("seat") == name]) >= 2


async def test_interims_over_a_real_server_with_slow_decodes(tmp_path, model_cache) -> None:
    speech = paused_speech()
    with run_server(tmp_path, model_cache, CONFIG, module="tests.slow_decode_server") as server:
        async with connect(server.url) as session:
            # the same speech on every seat at once is one voice to seat arbitration: off, each seat decodes
            await session.start(interim=True, arbitration=False)
            await asyncio.gather(*(send_pcm(session, speech, seat=seat, realtime_factor=1.0) for seat in SEATS))
            frames = await collect_until(session, lambda fs: len(commits(fs)) == len(SEATS), timeout=30)
    for seat in SEATS:
        [final] = of_type(frames, "final", seat)
        assert final["text"] == "".join(PHRASES), final
        assert assert_interims_lead_to_their_finals([f for f in frames if f.get("seat") == seat]) >= 2


def test_an_interim_older_than_one_sent_is_not_shown() -> None:
    """With several decode workers a later interim can finish first; the older one would step back."""
    from kitt_stt.asr.engine import DecodeOptions
    from kitt_stt.pipeline.segment import Segment

    segment = Segment(segment_id=1, start_ms=0, options=DecodeOptions(), interim_enabled=True)
    assert segment.show_interim("打开车", 800)
    assert not segment.show_interim("打开", 600)  # older: would take back a word already shown
    assert not segment.show_interim("打开车", 1000)  # the same text again
    assert not segment.show_interim("", 1200)  # the wake phrase alone
    assert segment.show_interim("打开车门", 1200)
