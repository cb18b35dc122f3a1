"""An async client session for protocol v1 (msgpack over WebSocket).

    async with connect("ws://127.0.0.1:8000/stt/sensevoice") as session:
        await session.send_audio(pcm_bytes, seat="driver")
        async for frame in session.frames():
            ...

Frames are plain dicts exactly as they arrived (``type`` says which).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgpack
import websockets
from websockets.asyncio.client import ClientConnection


class SttSession:
    def __init__(self, websocket: ClientConnection, ready: dict[str, Any]) -> None:
        self.websocket = websocket
        self.ready = ready
        self._seq: dict[str, itertools.count] = {}

    async def send(self, frame: dict[str, Any]) -> None:
        await self.websocket.send(msgpack.packb(frame, use_bin_type=True))

    async def start(self, **settings: Any) -> None:
        await self.send({"type": "start", **settings})

    async def send_audio(self, pcm: bytes, seat: str = "default") -> None:
        seq = next(self._seq.setdefault(seat, itertools.count()))
        await self.send({"type": "audio", "seat": seat, "seq": seq, "pcm": pcm})

    async def vad(self, event: str, seat: str = "default") -> None:
        await self.send({"type": "vad", "seat": seat, "event": event})

    async def finalize(self, seat: str | None = None) -> None:
        await self.send({"type": "finalize"} if seat is None else {"type": "finalize", "seat": seat})

    async def configure(self, **settings: Any) -> None:
        await self.send({"type": "configure", **settings})

    async def ping(self, ping_id: Any = None) -> None:
        await self.send({"type": "ping", "id": ping_id})

    async def close(self) -> None:
        """Ask the server to flush every seat; it then closes the socket with 1000."""
        await self.send({"type": "close"})

    async def receive(self) -> dict[str, Any]:
        return decode(await self.websocket.recv())

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        """Every frame until the server closes the connection."""
        try:
            while True:
                yield await self.receive()
        except websockets.ConnectionClosedOK:
            return


def decode(message: bytes | str) -> dict[str, Any]:
    if isinstance(message, str):
        raise ValueError("server sent a text message; protocol v1 uses binary msgpack frames")
    frame = msgpack.unpackb(message, raw=False)
    if not isinstance(frame, dict):
        raise ValueError("server sent a frame that is not a map")
    return frame


@asynccontextmanager
async def connect(url: str, token: str | None = None, open_timeout: float = 10.0) -> AsyncIterator[SttSession]:
    """Open a session and wait for its ``ready`` frame (an ``error`` frame raises ``ConnectionError``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with websockets.connect(url, additional_headers=headers, open_timeout=open_timeout,
                                  max_size=1 << 22) as websocket:
        first = decode(await websocket.recv())
        if first.get("type") != "ready":
            raise ConnectionError(f"server refused the session: {first.get('code')}: {first.get('message')}")
        yield SttSession(websocket, first)
