"""The segment-start flooder: a client that opens a segment per 20 ms frame on many seats as fast
as it can (``vad start``, audio, ``vad stop``, ``finalize``), the attack of issue 11.  The flood
bench runs it in its own process, the abuse soak in bursts."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import websockets

from kitt_stt.client.session import decode
from tests.helpers import FRAME_BYTES


def loudest_frame(samples: np.ndarray) -> bytes:
    """The 20 ms frame with the most energy: voiced for any VAD, so every flood group is speech."""
    usable = samples[: samples.shape[0] // (FRAME_BYTES // 2) * (FRAME_BYTES // 2)].astype(np.float64)
    if usable.size == 0:
        raise ValueError("the phrase is shorter than one 20 ms frame")
    energy = (usable.reshape(-1, FRAME_BYTES // 2) ** 2).sum(axis=1)
    best = int(np.argmax(energy))
    return samples[best * (FRAME_BYTES // 2):(best + 1) * (FRAME_BYTES // 2)].astype("<i2").tobytes()


@dataclass
class FloodCounts:
    connections: int = 0
    refused: int = 0  # sessions the server would not open (an error frame instead of ready)
    groups: int = 0  # vad start + audio + vad stop + finalize, sent on one seat
    seconds: float = 0.0
    received: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)  # "client" or the server's close code

    def as_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "refused": self.refused, "groups": self.groups,
                "seconds": self.seconds, "received": dict(self.received), "errors": dict(self.errors),
                "ended": dict(self.ended)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FloodCounts:
        return cls(int(data.get("connections", 0)), int(data.get("refused", 0)), int(data.get("groups", 0)),
                   float(data.get("seconds", 0.0)), Counter(data.get("received", {})),
                   Counter(data.get("errors", {})), Counter(data.get("ended", {})))


def flood_messages(seats: int, frame: bytes) -> list[list[bytes]]:
    """Per seat, the four messages of one flood group, packed once: packing them on every send
    would make the flooder slower than the server it is meant to outrun."""
    groups = []
    for index in range(seats):
        seat = f"flood{index}"
        groups.append([msgpack.packb(message, use_bin_type=True) for message in (
            {"type": "vad", "seat": seat, "event": "start"},
            {"type": "audio", "seat": seat, "pcm": frame},
            {"type": "vad", "seat": seat, "event": "stop"},
            {"type": "finalize", "seat": seat},
        )])
    return groups


async def _count_frames(websocket: Any, counts: FloodCounts) -> None:
    """Read everything the server sends; a flooder that stopped reading would only be closed as a
    slow consumer, which measures the outbound queue instead of the scheduler."""
    with contextlib.suppress(websockets.ConnectionClosed):
        async for message in websocket:
            try:
                frame = decode(message)
            except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                counts.received["undecodable"] += 1
                continue
            kind = str(frame.get("type"))
            counts.received[kind] += 1
            if kind == "error":
                counts.errors[str(frame.get("code"))] += 1


async def flood_connection(url: str, messages: list[list[bytes]], stop: Callable[[], bool],
                           counts: FloodCounts) -> None:
    """One flooding connection until ``stop()`` or the server closes it; then the transport is
    dropped without ``close`` or a close handshake, as a crashing or hostile client would."""
    websocket = await websockets.connect(url, open_timeout=10, max_size=1 << 22, close_timeout=1)
    reader: asyncio.Task[None] | None = None
    try:
        first = decode(await asyncio.wait_for(websocket.recv(), 10))
        if first.get("type") != "ready":
            counts.refused += 1
            counts.errors[str(first.get("code"))] += 1
            return
        counts.connections += 1
        reader = asyncio.create_task(_count_frames(websocket, counts))
        try:
            while not stop() and not reader.done():
                for group in messages:
                    for message in group:
                        await websocket.send(message)
                counts.groups += len(messages)
                await asyncio.sleep(0)  # let the reader drain what came back
        except websockets.ConnectionClosed:
            pass
        code = websocket.close_code
        counts.ended["client" if code is None else str(code)] += 1
        websocket.transport.abort()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(reader, 2.0)
    finally:  # also when a caller's timeout cancels us mid-send
        websocket.transport.abort()
        if reader is not None:
            reader.cancel()


async def flood(url: str, seats: int, frame: bytes, stop: Callable[[], bool], counts: FloodCounts,
                reconnect: bool = True, progress: bool = False) -> FloodCounts:
    """Flood until ``stop()``; with ``reconnect`` a connection the server closes is replaced, as a
    persistent attacker would do (a refused one is retried after 100 ms)."""
    messages = flood_messages(seats, frame)
    started = time.monotonic()
    reporter = asyncio.create_task(_report_flood(counts, started)) if progress else None
    try:
        while not stop():
            try:
                await flood_connection(url, messages, stop, counts)
            except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                counts.ended[f"connect failed: {type(exc).__name__}"] += 1
            if not reconnect:
                break
            if not stop():
                await asyncio.sleep(0.1)
    finally:
        counts.seconds += time.monotonic() - started  # += : soak.py floods many times into one tally
        if reporter is not None:
            reporter.cancel()
    return counts


async def _report_flood(counts: FloodCounts, started: float) -> None:
    while True:
        await asyncio.sleep(2.0)
        print(f"  flooder: {time.monotonic() - started:.0f} s, {counts.groups} groups sent, "
              f"{counts.received['final']} finals, errors {dict(counts.errors)}", file=sys.stderr, flush=True)


def flood_summary(counts: FloodCounts) -> str:
    rate = counts.groups / counts.seconds if counts.seconds else 0.0
    received = ", ".join(f"{kind} {count}" for kind, count in counts.received.most_common()) or "nothing"
    errors = ", ".join(f"{code} {count}" for code, count in counts.errors.most_common()) or "none"
    ended = ", ".join(f"{how} {count}" for how, count in counts.ended.most_common()) or "-"
    return (f"flooder: {counts.connections} connections ({counts.refused} refused), {counts.groups} groups "
            f"(vad start + 20 ms audio + vad stop + finalize on one seat) in {counts.seconds:.1f} s = {rate:.0f}/s\n"
            f"  received: {received}\n  errors by code: {errors}\n  connections ended: {ended}")

