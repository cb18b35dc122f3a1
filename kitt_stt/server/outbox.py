"""A session's outbound frames: one queue, one sender, bounded in frames, bytes and time.

Frames leave in exactly the order the pipeline emitted them.  A client that stops reading must
not make the server hold its answers without bound: past ``server.outbound_queue_frames``
frames or ``server.max_outbox_bytes`` bytes queued, or when the socket has taken nothing for
``server.send_stall_s`` seconds, the outbox overflows once.  Then what is still queued is
dropped (it would never be read), ``on_overflow`` is told why and how many bytes went, and the
session closes it (``slow_consumer``, docs/protocol.md) and resets the connection if the
client still leaves bytes unread (``ws_transport``).  Other sessions lose nothing: each has its own outbox.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.websockets import WebSocketDisconnect

from kitt_stt.str_enum import StrEnum

log = logging.getLogger(__name__)


class Overflow(StrEnum):
    """Why a client was found not to read its frames (the ``reason`` label of the metric)."""

    FRAMES = "frames"  # server.outbound_queue_frames queued
    BYTES = "bytes"  # server.max_outbox_bytes queued
    STALL = "stall"  # the socket took nothing for server.send_stall_s


@dataclass(frozen=True)
class OutboxLimits:
    max_frames: int
    max_bytes: int
    stall_s: float


@dataclass(frozen=True)
class Outgoing:
    payload: bytes
    kind: str
    seat: str | None


Send = Callable[[Outgoing], Awaitable[None]]


class Outbox:
    def __init__(self, limits: OutboxLimits, on_overflow: Callable[[Overflow, int], None]) -> None:
        self._limits = limits
        self._on_overflow = on_overflow
        self._items: deque[Outgoing | None] = deque()
        self._ready = asyncio.Event()
        self._bytes = 0
        self._overflowed = False
        self._ended = False

    @property
    def bytes(self) -> int:
        """Encoded frames waiting for the socket."""
        return self._bytes

    @property
    def overflowed(self) -> bool:
        return self._overflowed

    def put(self, item: Outgoing) -> bool:
        """Queue ``item``; False (and one overflow) when it would pass a limit, or after an overflow or the end."""
        if self._ended or self._overflowed:
            return False
        if len(self._items) >= self._limits.max_frames:
            self.overflow(Overflow.FRAMES)
            return False
        if self._bytes + len(item.payload) > self._limits.max_bytes:
            self.overflow(Overflow.BYTES)
            return False
        self._bytes += len(item.payload)
        self._items.append(item)
        self._ready.set()
        return True

    def overflow(self, reason: Overflow) -> None:
        """Drop what is queued and report ``reason``, once; later frames are refused until ``end``."""
        if self._overflowed:
            return
        self._overflowed = True
        dropped = self._bytes
        self._items.clear()
        self._bytes = 0
        if self._ended:
            self._items.append(None)  # an end already asked for still stops the sender
        self._on_overflow(reason, dropped)

    def put_last(self, item: Outgoing) -> None:
        """Queue ``item`` even after an overflow (the fatal error that explains it), then end."""
        if not self._ended:
            self._items.append(item)
            self._bytes += len(item.payload)
            self.end()

    def end(self) -> None:
        """No more frames: the sender stops once what is queued has gone out."""
        if not self._ended:
            self._ended = True
            self._items.append(None)
            self._ready.set()

    async def run(self, send: Send) -> None:
        """Send queued items in order until ``end``; a send that waits ``stall_s`` is an overflow.

        After a stall one more item may go (the error frame queued by ``put_last``), under the same
        bound; a second stall ends the sender.  A peer that went away ends it quietly; any other
        failure of the socket is logged once here, since the session then just ends.
        """
        stall_s = self._limits.stall_s
        while True:
            while not self._items:
                self._ready.clear()
                await self._ready.wait()
            item = self._items.popleft()
            if item is None:
                return
            self._bytes -= len(item.payload)
            try:
                await asyncio.wait_for(send(item), stall_s)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                if self._overflowed:
                    return
                self.overflow(Overflow.STALL)
            except (WebSocketDisconnect, OSError):
                self.end()
                return  # the peer is gone; the receive loop notices
            except RuntimeError as exc:  # the socket in a state it should not be in: worth knowing
                log.warning("sending a %s frame (seat %s) failed: %s", item.kind, item.seat, exc)
                self.end()
                return
