"""What both framework adapters need to talk to a kitt-stt server (protocol v1, docs/protocol.md).

Rules shared by the adapters, so that both behave the same:

* audio goes out as 20 ms frames of 16 kHz mono int16 (``Reframer`` cuts whatever size the
  framework hands over);
* every frame sent since the seat's last ``commit`` is kept (``ReplayBuffer``): when the
  connection drops mid-turn, the new connection gets that audio first, so the turn is recognised
  whole instead of losing its beginning. While the connection is down (``offline``) every frame
  is kept too, since no ``speech_start`` can then say that a turn began. Otherwise, outside a
  turn, only the last ``idle_keep_ms`` are kept (enough for the server's pre-roll); and never
  more than the server's ``burst_ms`` allows to be sent at once, since a replay faster than that
  would be dropped by its rate limit;
* a whole buffer, or a backlog after a reconnect, is sent as fast as the server's
  ``ready.limits`` allow (``Pacer``), not at once: beyond ``burst_ms`` the server drops what comes
  faster than ``realtime_factor``. Live audio, which comes in real time, is never held back;
* reconnects wait ``backoff_delays`` (exponential, capped) between attempts;
* in silence nothing but ``ping`` is sent, every ``keepalive_s`` (the server ends sessions that
  send nothing for ``server.idle_timeout_s``, 60 s by default).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

SAMPLE_RATE = 16000
FRAME_BYTES = 640  # 20 ms of 16 kHz mono int16
FRAME_MS = 20
PACING_MARGIN = 0.9  # stay under the server's allowed rate (``kitt-stt transcribe`` paces with send_after_s too)


@dataclass(frozen=True)
class LinkOptions:
    """One seat of one server session, as a framework adapter opens it."""

    url: str
    seat: str = "driver"
    language: str | None = None  # None: the server's default (asr.language)
    hotwords: tuple[str, ...] = ()
    token: str | None = None
    eager: bool = True  # ask for turn_eager / turn_resumed
    interim: bool = True
    client: str = "kitt-stt-integration"
    keepalive_s: float = 10.0
    replay_max_ms: int = 30_000
    idle_keep_ms: int = 1000
    backoff_min_s: float = 0.5
    backoff_max_s: float = 8.0
    max_reconnects: int = 6
    extra_start: dict[str, Any] = field(default_factory=dict)  # e.g. {"wake": {...}, "text": {...}}

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def start_frame(self) -> dict[str, Any]:
        """``turn_ends``: the adapters open the user's turn at its first ``speech_start``, so they
        need every turn's end, including the ``filtered`` of one with nothing to commit (a cough)."""
        frame: dict[str, Any] = {"type": "start", "seats": [self.seat], "interim": self.interim,
                                 "eager": self.eager, "turn_ends": True, "client": self.client, **self.extra_start}
        if self.language is not None:
            frame["language"] = self.language
        if self.hotwords:
            frame["hotwords"] = list(self.hotwords)
        return frame


def encode(frame: dict[str, Any]) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


def decode(message: bytes | str) -> dict[str, Any]:
    if isinstance(message, str):
        raise ValueError("the server sent a text message; protocol v1 uses binary msgpack frames")
    frame = msgpack.unpackb(message, raw=False)
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ValueError("the server sent a frame that is not a map with a type")
    return frame


class Reframer:
    """Cut a stream of int16 PCM of any chunk size into 20 ms frames."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def push(self, pcm: bytes) -> list[bytes]:
        self._pending += pcm
        whole = len(self._pending) // FRAME_BYTES * FRAME_BYTES
        frames = [bytes(self._pending[i:i + FRAME_BYTES]) for i in range(0, whole, FRAME_BYTES)]
        del self._pending[:whole]
        return frames

    def flush(self) -> list[bytes]:
        """The remainder, padded with silence to a whole frame (before a finalize or close)."""
        if not self._pending:
            return []
        frame = bytes(self._pending) + bytes(FRAME_BYTES - len(self._pending))
        self._pending.clear()
        return [frame]


class ReplayBuffer:
    """The seat's frames since its last commit (bounded), to send again on a new connection."""

    def __init__(self, max_ms: int, idle_keep_ms: int) -> None:
        self._frames: deque[bytes] = deque()
        self._max_frames = max(1, max_ms // FRAME_MS)
        self._idle_frames = max(1, idle_keep_ms // FRAME_MS)
        self._added = 0  # frames ever added: positions for ``since``
        self.in_turn = False
        self.offline = False  # frames went unsent: keep them all (up to the limit) for the replay

    def limit_to(self, burst_ms: int) -> None:
        """Never keep more than the server accepts at once (its ``ready.limits.burst_ms``)."""
        self._max_frames = max(1, min(self._max_frames, burst_ms // FRAME_MS - self._idle_frames))

    def add(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._added += 1
        keep = self._max_frames if self.in_turn or self.offline else self._idle_frames
        while len(self._frames) > keep:
            self._frames.popleft()

    @property
    def oldest(self) -> int:
        """The position of the oldest frame kept (positions count every frame ever added)."""
        return self._added - len(self._frames)

    def since(self, position: int) -> tuple[list[bytes], int]:
        """The kept frames from ``position`` on, and the position after them: a replay sends in
        rounds until nothing is left, so frames added while it was sending go out after it, in order."""
        skip = max(0, position - self.oldest)
        frames = list(self._frames)[skip:]
        return frames, self.oldest + skip + len(frames)

    def committed(self) -> None:
        """The turn is settled on the server: nothing before this needs sending again."""
        self._frames.clear()
        self.in_turn = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self._frames))

    def __len__(self) -> int:
        return len(self._frames)


def send_after_s(index: int, limits: dict[str, Any]) -> float:
    """When frame ``index`` of a buffer sent as fast as allowed may go out, in seconds after the
    first: the server accepts ``burst_ms`` at once, then ``realtime_factor`` x real time
    (``ready.limits``), and drops (``rate_limited``) what comes faster."""
    factor = float(limits.get("realtime_factor", 1.0)) * PACING_MARGIN
    burst_ms = float(limits.get("burst_ms", 0)) * PACING_MARGIN
    return max(0.0, index * FRAME_MS - burst_ms) / 1000.0 / factor


class Pacer:
    """The frames of one connection, no faster than its server accepts them (``send_after_s``)."""

    def __init__(self, limits: dict[str, Any]) -> None:
        self._limits = limits
        self._started = time.monotonic()
        self._sent = 0

    async def wait(self) -> None:
        """Before sending the next frame."""
        delay = self._started + send_after_s(self._sent, self._limits) - time.monotonic()
        self._sent += 1
        if delay > 0:
            await asyncio.sleep(delay)


def backoff_delays(minimum: float, maximum: float, attempts: int) -> Iterator[float]:
    """Seconds to wait before each reconnect attempt: doubling from ``minimum``, capped at ``maximum``."""
    delay = minimum
    for _ in range(attempts):
        yield delay
        delay = min(maximum, delay * 2)
