"""Protocol rules of docs/protocol.md over a real WebSocket: ping ids come back exactly, seat names
and client ids refuse control/bidi characters, a hotword with a colon is written with an explicit
boost, and a turn's segments are joined by the documented rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from kitt_stt.client.session import SttSession, connect
from tests.helpers import RunningServer, collect_until, commits, of_type, run_server, send_pcm, tone_pcm


def packed(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


async def expect_bad_field(session: SttSession, frame: dict[str, Any]) -> dict[str, Any]:
    """Send a raw frame; the answer is one non-fatal ``bad_field`` error."""
    await session.websocket.send(packed(frame))
    frames = await collect_until(session, lambda fs: bool(of_type(fs, "error")), timeout=5)
    error = of_type(frames, "error")[0]
    assert error["code"] == "bad_field" and error["fatal"] is False, error
    return error


async def transcribe(session: SttSession, text: str, seat: str) -> str:
    """Speak ``text`` on ``seat`` and return its commit: proves the seat works end to end."""
    await send_pcm(session, tone_pcm(text, tail_ms=0), seat=seat)
    await session.finalize(seat)
    frames = await collect_until(session, lambda fs: bool(commits(fs, seat)), timeout=10)
    assert of_type(frames, "error") == []
    return commits(frames, seat)[0]["text"]


PING_IDS: list[Any] = [
    b"\x00\xff\xfe",  # bin that is not UTF-8: was an `internal` error
    b"ab",  # bin that is UTF-8: came back as the str "ab"
    b"",
    None,
    [1, b"\x80", None, "s", [b"x", {"k": b"v"}]],
    {"bin": b"\xc1", "list": [1.5, -3, True], "nil": None, "map": {"deep": [b""]}},
    {b"bin-key": "value"},
    2**64 - 1,
    -(2**63),
    "text",
    False,
    0.25,
]


async def test_pong_echoes_every_kind_of_id_exactly(server) -> None:
    async with connect(server.url) as session:
        for ping_id in PING_IDS:
            await session.ping(ping_id)
        frames = await collect_until(session, lambda fs: len(of_type(fs, "pong")) == len(PING_IDS), timeout=5)
    assert of_type(frames, "error") == []
    echoed = [frame["id"] for frame in of_type(frames, "pong")]
    assert echoed == PING_IDS
    assert [packed(value) for value in echoed] == [packed(value) for value in PING_IDS]  # bin stays bin


@pytest.mark.parametrize("frame", [
    pytest.param({"type": "audio", "seat": "dri\u202ever", "pcm": bytes(640)}, id="audio-seat-rlo"),
    pytest.param({"type": "vad", "seat": "\u2066driver", "event": "start"}, id="vad-seat-isolate"),
    pytest.param({"type": "finalize", "seat": "driver\u200f"}, id="finalize-seat-rlm"),
    pytest.param({"type": "start", "seats": ["rear\u2028left"]}, id="start-seats-line-separator"),
    pytest.param({"type": "start", "client": "car\u200b7"}, id="client-zero-width-space"),
    pytest.param({"type": "start", "client": "car\u061c7"}, id="client-arabic-letter-mark"),
    pytest.param({"type": "start", "client": "car\x1b[2J"}, id="client-escape"),
])
async def test_unprintable_seat_or_client_is_refused_and_printable_ones_work(server, frame) -> None:
    async with connect(server.url) as session:
        error = await expect_bad_field(session, frame)
        assert "U+" in error["message"]
        await session.start(client="车机 v2.1", seats=["主驾", "rear left"])
        assert await transcribe(session, "车门", seat="主驾") == "车门"


async def test_hotword_with_a_colon_needs_an_explicit_boost(server) -> None:
    async with connect(server.url) as session:
        error = await expect_bad_field(session, {"type": "configure", "hotwords": ["12:30"]})
        assert "'12:30:1.5'" in error["message"]
        await session.configure(hotwords=["12:30:1.5", "打开车门:5"])
        await session.ping("after")
        frames = await collect_until(session, lambda fs: bool(of_type(fs, "pong")), timeout=5)
    assert of_type(frames, "error") == []


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A server whose turns end only on ``finalize`` (wait 60 s), so every segment joins one turn."""
    with run_server(tmp_path_factory.mktemp("patient"), model_cache, {"turn": {"wait_ms": 60_000}}) as running:
        yield running


@pytest.mark.parametrize(("first", "second", "joined"), [
    pytest.param("打开", "车门", "打开车门", id="han-han"),
    pytest.param("打开", "AB", "打开AB", id="han-latin-no-space"),
    pytest.param("AB", "CD", "AB CD", id="latin-latin-space"),
])
async def test_commit_joins_segments_by_the_documented_rule(patient_server: RunningServer, first: str, second: str,
                                                            joined: str) -> None:
    """Two segments (a 700 ms pause ends the first) in one turn, committed by ``finalize``."""
    async with connect(patient_server.url) as session:
        await send_pcm(session, tone_pcm(first, tail_ms=700) + tone_pcm(second, lead_ms=0, tail_ms=0))
        await session.finalize()
        frames = await collect_until(session, lambda fs: bool(commits(fs)), timeout=10)
    assert [f["text"] for f in of_type(frames, "final")] == [first, second]
    assert [c["text"] for c in commits(frames)] == [joined]
