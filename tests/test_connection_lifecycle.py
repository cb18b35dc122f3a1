"""Session endings in isolation (a fake socket): one drain, one flush however many ask, and
hotwords prepared off the decode path when a session's settings arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgpack
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
from kitt_stt.audio.vad import EndReason
from kitt_stt.config.schema import AppConfig
from kitt_stt.hotwords import Hotword
from kitt_stt.server.app import create_app
from kitt_stt.server.connection import Connection
from kitt_stt.server.state import ServiceState

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


class RecordingEngine(AsrEngine):
    info = EngineInfo(name="fake", kind="fake", provider="cpu", hotwords=True)

    def __init__(self) -> None:
        self.prepared: list[tuple[Hotword, ...]] = []

    def decode_batch(self, requests: Sequence[AsrRequest], timer=None) -> list[AsrResult]:
        return [AsrResult(text="") for _ in requests]

    def prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        self.prepared.append(hotwords)


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.closed_with: int | None = None

    async def send_bytes(self, payload: bytes) -> None:
        self.sent.append(msgpack.unpackb(payload))

    async def close(self, code: int, reason: str = "") -> None:
        self.closed_with = code


def service(engine: AsrEngine | None = None) -> ServiceState:
    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), engine or RecordingEngine())
    return app.state.service


async def test_a_drain_waits_for_a_close_that_is_already_flushing() -> None:
    socket = FakeSocket()
    connection = Connection(socket, service())  # type: ignore[arg-type]
    flushed: list[str] = []

    async def slow_flush(seats, reason) -> None:
        await asyncio.sleep(0.2)
        flushed.append(reason.value)

    connection._flush_seats = slow_flush  # type: ignore[method-assign]
    closing = asyncio.create_task(connection._finish(EndReason.STOP))  # the client's `close`
    await asyncio.sleep(0)
    await connection.shutdown()  # SIGTERM arrives while that flush runs
    assert flushed == ["stop"] and socket.closed_with == 1000  # one flush, finished before the drain returned
    await closing


async def test_one_drain_however_often_it_is_asked_for() -> None:
    state = service()
    shutdowns: list[int] = []

    class Session:
        async def shutdown(self) -> None:
            shutdowns.append(1)
            await asyncio.sleep(0.05)

    state.connections.add(Session())  # type: ignore[arg-type]
    await asyncio.gather(state.drain(5.0), state.drain(5.0))  # the signal handler and the shutdown hook
    await state.drain(5.0)
    assert shutdowns == [1] and state.draining and not state.ready


async def test_hotwords_are_prepared_when_the_settings_arrive() -> None:
    engine = RecordingEngine()
    connection = Connection(FakeSocket(), service(engine))  # type: ignore[arg-type]
    start = msgpack.packb({"type": "start", "hotwords": ["打开车门:2", "GPS"]}, use_bin_type=True)
    assert await connection._handle(start) is False
    assert engine.prepared == [(Hotword("打开车门", 2.0), Hotword("GPS"))]
    await connection._handle(msgpack.packb({"type": "configure", "language": "auto"}, use_bin_type=True))
    assert len(engine.prepared) == 1  # unchanged list: nothing to build again
