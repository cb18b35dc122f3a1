"""Every frame of one scripted multi-seat session on the tone model, against a recording.

The recording (``tests/fixtures/golden/multi_seat_tone.json``) was made by this test on the seat
pipeline as it stands before it is split into its rooms (issue 21), so the split can be shown to
change nothing a client can see. The script runs four seats on one connection: two turns each, one
turn with a pause inside (two segments, one commit), a seat on client VAD, and a seat finalized
mid-speech. Audio goes at half real time, so every interim is asked for by audio time (its
wall-time gate has always passed) and every tone decode ends before the next frame: the frames are
the same on every run.

Compared per seat, in order, without the fields that measure time on the wall clock (latencies,
queue and decode times, the decision's waits). Re-record with ``KITT_STT_GOLDEN_RECORD=1`` only for
a change that means to alter the wire output, and say so in the commit.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kitt_stt.client.session import SttSession, connect
from tests.helpers import FRAME_BYTES, frames_of, run_server, silence, tone_pcm

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "multi_seat_tone.json"
REALTIME = 0.5
#: measured on the wall clock, so never the same twice
WALL_CLOCK_FIELDS = {"server_latency_ms", "timing", "wait_ms", "model_ms", "elapsed_ms"}
# driver and rear_left say "打开" at the same instant, identical copies: seat arbitration would keep one
# (the recording predates it), so it is off here
SETTINGS = {"interim": {"start_ms": 200, "min_interval_ms": 200}, "turn": {"wait_ms": 1500, "model": None},
            "vad": {"arbitration": False}}


def script() -> dict[str, list[tuple[str, Any]]]:
    """Per seat: ("audio", pcm) and ("vad", event) / ("finalize", None) steps, in order."""
    return {
        "driver": [("audio", tone_pcm("打开车门", tail_ms=0) + silence(400) + tone_pcm("AB", lead_ms=0, tail_ms=0)
                    + silence(3500) + tone_pcm("关车窗", lead_ms=0, tail_ms=3500))],
        "passenger": [("audio", silence(300) + tone_pcm("开门CDEF", tail_ms=3500) + tone_pcm("窗", lead_ms=0,
                                                                                          tail_ms=3500))],
        "rear_left": [("vad", "start"), ("audio", tone_pcm("打开", tail_ms=600) + tone_pcm("车门", lead_ms=0,
                                                                                          tail_ms=300)),
                      ("vad", "stop"), ("audio", silence(3000))],
        "rear_right": [("audio", silence(600) + tone_pcm("ABCDEF", lead_ms=0, tail_ms=0)), ("finalize", None),
                       ("audio", silence(2500))],
    }


async def play(session: SttSession, seat: str, steps: list[tuple[str, Any]]) -> None:
    """One seat's steps, audio paced on absolute deadlines."""
    loop = asyncio.get_running_loop()
    started, sent = loop.time(), 0
    for kind, value in steps:
        if kind == "audio":
            for frame in frames_of(value):
                await asyncio.sleep(max(0.0, started + sent * 0.02 / REALTIME - loop.time()))
                await session.send_audio(frame, seat=seat)
                sent += 1
        elif kind == "vad":
            await session.vad(value, seat=seat)
        else:
            await session.finalize(seat)


def scrubbed(frame: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in frame.items():
        if key in WALL_CLOCK_FIELDS:
            continue
        out[key] = scrubbed(value) if isinstance(value, dict) else value
    return out


async def session_frames(url: str) -> dict[str, list[dict[str, Any]]]:
    steps = script()
    async with connect(url) as session:
        players = [asyncio.create_task(play(session, seat, seat_steps)) for seat, seat_steps in steps.items()]
        frames: list[dict[str, Any]] = []

        async def collect() -> None:
            while True:
                frames.append(await session.receive())

        collector = asyncio.create_task(collect())
        await asyncio.gather(*players)
        await asyncio.sleep(2.0)  # the last turns' waits (1.5 s) run out
        collector.cancel()
    per_seat: dict[str, list[dict[str, Any]]] = {seat: [] for seat in steps}
    for frame in frames:
        if frame.get("seat") in per_seat:
            per_seat[frame["seat"]].append(scrubbed(frame))
    return per_seat


def test_the_wire_output_of_a_scripted_session_is_unchanged(tmp_path: Path, model_cache: Path) -> None:
    assert FRAME_BYTES == 640
    with run_server(tmp_path, model_cache, SETTINGS) as server:
        got = asyncio.run(session_frames(server.url))
    if os.environ.get("KITT_STT_GOLDEN_RECORD"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, ensure_ascii=False, indent=1) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert all(expected[seat] for seat in expected)  # the recording holds frames for every seat
    for seat in expected:
        assert got[seat] == expected[seat], seat
