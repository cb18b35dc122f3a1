"""The victim of a flood: one seat speaking a phrase in real time (20 ms frames on absolute
deadlines, the server's VAD), each final matched to its utterance by audio time, so a bench can
say how long a person waited for their text and whether any was lost."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from kitt_stt.client.session import connect
from tests.helpers import FRAME_BYTES, frames_of

FRAME_MS = 20
VICTIM_SEAT = "driver"
LEAD_MS = 1000  # silence before the first utterance: the VAD's pre-roll and noise floor settle


@dataclass(frozen=True)
class VictimPlan:
    """Every frame the victim sends in one phase, and where each utterance's speech is."""

    frames: list[bytes]
    starts: list[int]  # frame index where each utterance's phrase begins
    last_voiced: list[int]  # frame index of each utterance's last voiced frame
    expected_text: str | None

    @property
    def starts_ms(self) -> list[int]:
        return [index * FRAME_MS for index in self.starts]


def build_plan(phrase: np.ndarray, utterances: int, gap_ms: int, expected_text: str | None = None,
               lead_ms: int = LEAD_MS) -> VictimPlan:
    """Lead silence, then ``utterances`` x (phrase + ``gap_ms`` silence), cut into 20 ms frames."""
    phrase_frames = frames_of(phrase.astype("<i2").tobytes())
    silent = bytes(FRAME_BYTES)
    frames = [silent] * (lead_ms // FRAME_MS)
    starts, last_voiced = [], []
    for _ in range(utterances):
        starts.append(len(frames))
        frames.extend(phrase_frames)
        last_voiced.append(len(frames) - 1)
        frames.extend([silent] * (gap_ms // FRAME_MS))
    return VictimPlan(frames, starts, last_voiced, expected_text)


def utterance_of(end_ms: int, starts_ms: list[int]) -> int:
    """Which utterance a final belongs to: the last one that began at or before its ``end_ms``.

    Matching by audio time, not by arrival order, keeps a lost or split final from shifting
    every later latency onto the wrong utterance."""
    return max(0, bisect.bisect_right(starts_ms, end_ms) - 1)


@dataclass
class UtteranceResult:
    index: int
    sent_at: float | None = None  # monotonic: the utterance's last voiced frame was sent
    received_at: float | None = None  # monotonic: its (latest) final arrived
    server_latency_ms: float | None = None
    finals: int = 0
    text: str = ""

    @property
    def latency_ms(self) -> float | None:
        if self.sent_at is None or self.received_at is None:
            return None
        return (self.received_at - self.sent_at) * 1000.0


@dataclass
class PhaseResult:
    phase: str
    utterances: list[UtteranceResult]
    timeout_s: float
    expected_text: str | None = None
    errors: Counter[str] = field(default_factory=Counter)
    note: str = ""  # why the victim's connection failed, when it did

    def on_time(self) -> list[UtteranceResult]:
        limit = self.timeout_s * 1000.0
        return [u for u in self.utterances if u.latency_ms is not None and u.latency_ms <= limit]

    @property
    def received(self) -> int:
        return len(self.on_time())

    @property
    def lost(self) -> int:
        return len(self.utterances) - self.received

    @property
    def late(self) -> int:
        """Finals that did arrive, but after the timeout (counted in ``lost`` as well)."""
        return sum(1 for u in self.utterances if u.latency_ms is not None) - self.received

    @property
    def wrong_texts(self) -> int:
        if self.expected_text is None:
            return 0
        return sum(1 for u in self.on_time() if u.text != self.expected_text)

    def latencies(self) -> list[float]:
        return [u.latency_ms for u in self.on_time() if u.latency_ms is not None]

    def server_latencies(self) -> list[float]:
        return [u.server_latency_ms for u in self.on_time() if u.server_latency_ms is not None]


async def run_victim(url: str, phase: str, plan: VictimPlan, timeout_s: float, language: str | None) -> PhaseResult:
    """Speak the plan in real time on one seat; never waits more than ``timeout_s`` past the last
    utterance for its final, whatever the server does."""
    result = PhaseResult(phase, [UtteranceResult(index) for index in range(len(plan.starts))], timeout_s,
                         plan.expected_text)
    voiced_end = {frame: index for index, frame in enumerate(plan.last_voiced)}
    starts_ms = plan.starts_ms
    all_in = asyncio.Event()
    total = len(result.utterances)

    async def receive(session: Any) -> None:
        try:
            async for frame in session.frames():
                now = time.monotonic()
                kind = frame.get("type")
                if kind == "error":
                    result.errors[str(frame.get("code"))] += 1
                elif kind == "final" and frame.get("seat") == VICTIM_SEAT:
                    utterance = result.utterances[utterance_of(int(frame.get("end_ms") or 0), starts_ms)]
                    utterance.finals += 1
                    if utterance.sent_at is None:  # a pause inside the phrase split it: wait for the tail's final
                        print(f"  {phase}: utterance {utterance.index + 1}/{total}: a final before its speech "
                              f"ended: {frame.get('text')!r}", file=sys.stderr, flush=True)
                        continue
                    utterance.received_at = now
                    utterance.server_latency_ms = frame.get("server_latency_ms")
                    utterance.text = str(frame.get("text", ""))
                    latency = utterance.latency_ms
                    late = " LATE: counted as lost" if latency is not None and latency > timeout_s * 1000 else ""
                    print(f"  {phase}: utterance {utterance.index + 1}/{total}: final after "
                          f"{'?' if latency is None else f'{latency:.0f}'} ms (server "
                          f"{utterance.server_latency_ms or 0:.0f} ms) {utterance.text!r}{late}",
                          file=sys.stderr, flush=True)
                    if all(u.received_at is not None for u in result.utterances):
                        all_in.set()
        except websockets.ConnectionClosed as exc:
            result.note = result.note or f"victim connection closed: {exc}"

    receiver: asyncio.Task[None] | None = None
    cap_s = len(plan.frames) * FRAME_MS / 1000.0 + timeout_s + 30.0  # bounded whatever the server does
    try:
        async with asyncio.timeout(cap_s), connect(url) as session:
            if language:
                await session.start(language=language, client="flood-bench victim")
            receiver = asyncio.create_task(receive(session))
            started = time.monotonic() + 0.05
            for index, frame in enumerate(plan.frames):
                delay = started + index * FRAME_MS / 1000.0 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await session.send_audio(frame, seat=VICTIM_SEAT)
                if index in voiced_end:
                    result.utterances[voiced_end[index]].sent_at = time.monotonic()
            last_sent = result.utterances[-1].sent_at or time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), max(0.0, last_sent + timeout_s - time.monotonic()))
            await session.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(receiver), 5.0)
    except (OSError, ConnectionError, TimeoutError, websockets.WebSocketException) as exc:
        result.note = result.note or f"victim connection failed: {type(exc).__name__}: {exc}"
    finally:
        if receiver is not None and not receiver.done():
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
    return result
