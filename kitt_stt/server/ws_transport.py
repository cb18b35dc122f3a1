"""uvicorn's WebSocket protocol, plus a way for a session to drop a peer that reads nothing.

uvicorn ends a connection with asyncio's ``transport.close()``, which waits for the write buffer
to drain first.  A client that stopped reading never lets it drain, so after a slow-consumer close
its TCP connection stayed ESTABLISHED, holding an fd and megabytes of kernel send queue for as
long as the client liked.  :class:`ResettableWebSocketProtocol` (the ``ws`` class ``runner``
gives uvicorn) puts a ``reset`` callable in the ASGI scope's extensions; :func:`reset_unread`
calls it once the session has given the client its chance to read (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import struct
import termios
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger(__name__)

RESET_EXTENSION = "kitt.reset"  # scope["extensions"][RESET_EXTENSION]["reset"](read_by) -> bytes left unread
LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST and frees the buffers


def kernel_unsent_bytes(sock: Any) -> int:
    """Bytes the kernel still holds for the peer (Linux SIOCOUTQ); 0 where it cannot say."""
    outq = getattr(termios, "TIOCOUTQ", None)  # the same request as SIOCOUTQ on sockets
    if sock is None or outq is None:
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), outq, struct.pack("i", 0))
    except (OSError, ValueError):  # closed already, or not a socket this request knows
        return 0
    return int(struct.unpack("i", answer)[0])


#: uvicorn stops reading a socket after every message it queues for the app and starts again when
#: the app takes it: two epoll calls per audio frame, the largest single cost of a seat-frame on the
#: loop. Small messages may queue up to this many before reading pauses; TCP still pushes back on a
#: client the app reads slowly (``server.max_messages_per_s``), a few KB later than before.
QUEUED_BEFORE_PAUSE = 8
SMALL_MESSAGE_BYTES = 4096


class ResettableWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol whose connection the application can reset, and
    which pauses reading only once several small messages wait (``QUEUED_BEFORE_PAUSE``)."""

    def send_receive_event_to_app(self) -> None:
        small = sum(len(part) for part in self.frames) <= SMALL_MESSAGE_BYTES
        if self.read_paused or not small or self.queue.qsize() + 1 >= QUEUED_BEFORE_PAUSE:
            super().send_receive_event_to_app()  # queued, then reading pauses until the app empties the queue
            return
        self.read_paused = True  # uvicorn reads this as "paused already": it queues without pausing
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lost = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()
        super().connection_lost(exc)

    async def run_asgi(self) -> None:
        self.scope["extensions"][RESET_EXTENSION] = {"reset": self.reset_if_unread}
        await super().run_asgi()

    async def reset_if_unread(self, read_by: float) -> int:
        """Give the peer until ``read_by`` (loop time) to take what was sent (our close frame
        included) and end the connection; if it is still there with bytes unread, reset it.  How
        many bytes it left (0: nothing done: the connection ended, or the peer has read everything
        and is left to the ordinary close)."""
        with contextlib.suppress(asyncio.TimeoutError):  # not the builtin on 3.10
            await asyncio.wait_for(self._lost.wait(), max(0.0, read_by - self.loop.time()))
        transport = self.transport
        if transport is None or self._lost.is_set():
            return 0
        sock = transport.get_extra_info("socket")
        unread = transport.get_write_buffer_size() + kernel_unsent_bytes(sock)
        if unread == 0:
            return 0
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        transport.abort()
        return unread


async def reset_unread(scope: Mapping[str, Any], session_id: str, read_by: float) -> None:
    """At ``read_by`` (loop time), reset the session's connection if its client still leaves
    bytes unread (see the module docstring)."""
    extension = scope.get("extensions", {}).get(RESET_EXTENSION)
    reset: Callable[[float], Awaitable[int]] | None = extension.get("reset") if extension else None
    if reset is None:  # another server (a test client, another protocol): nothing to reach
        return
    if unread := await reset(read_by):
        log.info("session %s: the client left %d bytes unread; connection reset", session_id, unread)
