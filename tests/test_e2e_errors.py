"""Every protocol error code, provoked over a real WebSocket; the session survives each one."""

from __future__ import annotations

import asyncio

import httpx
import msgpack
import pytest
import websockets

from kitt_stt.client.session import SttSession, connect
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, tone_pcm


async def still_transcribes(session: SttSession, seat: str = "default") -> None:
    await send_pcm(session, tone_pcm("车门", tail_ms=0), seat=seat)
    await session.finalize(seat)
    frames = await collect_until(session, lambda fs: bool(commits(fs, seat)), timeout=10)
    assert [f["text"] for f in of_type(frames, "final", seat)] == ["车门"]
    assert of_type(frames, "error") == []


async def expect_error(session: SttSession, payload: bytes | str, code: str) -> dict:
    await session.websocket.send(payload)
    frames = await collect_until(session, lambda fs: bool(of_type(fs, "error")), timeout=5)
    error = of_type(frames, "error")[0]
    assert error["code"] == code, error
    assert error["fatal"] is False
    assert error["message"]
    return error


def packed(frame: object) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


BAD_INPUTS = [
    pytest.param("hello", "bad_frame", id="text-message"),
    pytest.param(b"\xc1\xff\x00garbage", "bad_frame", id="garbage-bytes"),
    pytest.param(packed([1, 2, 3]), "bad_frame", id="msgpack-not-a-map"),
    pytest.param(packed({"type": "shout"}), "bad_frame", id="unknown-type"),
    pytest.param(packed({"seat": "x"}), "bad_frame", id="missing-type"),
    pytest.param(packed({"type": "audio", "seat": "default"}), "bad_field", id="missing-pcm"),
    pytest.param(packed({"type": "audio", "pcm": "not bytes"}), "bad_field", id="pcm-as-string"),
    pytest.param(packed({"type": "audio", "pcm": bytes(640), "seq": "1"}), "bad_field", id="seq-as-string"),
    pytest.param(packed({"type": "vad", "event": "maybe"}), "bad_field", id="bad-vad-event"),
    pytest.param(packed({"type": "start", "language": "klingon"}), "bad_field", id="unsupported-language"),
    pytest.param(packed({"type": "configure", "hotwords": ["x:notanumber"]}), "bad_field", id="bad-hotword"),
    pytest.param(packed({"type": "audio", "pcm": bytes(100)}), "bad_audio", id="pcm-not-10ms-multiple"),
    pytest.param(packed({"type": "audio", "pcm": bytes(32000 + 320)}), "bad_audio", id="pcm-over-1s"),
    pytest.param(packed({"type": "audio", "pcm": bytes(640), "sample_rate": 8000}), "bad_audio", id="wrong-rate"),
]


@pytest.mark.parametrize(("payload", "code"), BAD_INPUTS)
async def test_bad_input_gets_error_and_session_survives(server, payload, code) -> None:
    async with connect(server.url) as session:
        await expect_error(session, payload, code)
        await still_transcribes(session)


async def test_duplicate_seq_is_refused(server) -> None:
    async with connect(server.url) as session:
        await session.send({"type": "audio", "seat": "default", "seq": 5, "pcm": bytes(640)})
        error = await expect_error(session, packed({"type": "audio", "seq": 5, "pcm": bytes(640)}), "bad_field")
        assert "seq" in error["message"]


async def test_too_many_seats(server) -> None:
    async with connect(server.url) as session:
        limit = session.ready["limits"]["max_seats"]
        for index in range(limit):
            await session.send_audio(bytes(640), seat=f"seat{index}")
        error = await expect_error(session, packed({"type": "audio", "seat": "one-too-many", "pcm": bytes(640)}),
                                   "too_many_seats")
        assert error["seat"] == "one-too-many"
        await still_transcribes(session, seat="seat0")


async def test_errors_do_not_touch_other_connections(server) -> None:
    async with connect(server.url) as healthy, connect(server.url) as noisy:
        pcm = tone_pcm("打开车门", tail_ms=0)
        garbage = asyncio.gather(*(noisy.websocket.send(b"\x00\xff" * n) for n in range(1, 30)))
        await asyncio.gather(garbage, send_pcm(healthy, pcm))
        await healthy.finalize()
        frames = await collect_until(healthy, lambda fs: bool(commits(fs)), timeout=10)
        assert [f["text"] for f in of_type(frames, "final")] == ["打开车门"]
        assert of_type(frames, "error") == []


async def test_rate_limited_overloaded_unauthorized(tmp_path, model_cache) -> None:
    overrides = {"server": {"auth_token": "s3cret", "max_connections": 1,
                            "rate_limit": {"realtime_factor": 1.0, "burst_ms": 1000}}}
    with run_server(tmp_path, model_cache, overrides) as strict:
        # unauthorized: no token -> 401, wrong token -> 403, at the HTTP upgrade
        for token, status in ((None, 401), ("wrong", 403)):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with connect(strict.url, token=token):
                    pass
            assert refused.value.response.status_code == status
        async with connect(strict.url + "?token=s3cret"):
            pass  # the query-string form is accepted too
        async with connect(strict.url, token="s3cret") as session:
            # overloaded: a second session beyond max_connections=1 is refused with 1013
            with pytest.raises(ConnectionError, match="overloaded"):
                async with connect(strict.url, token="s3cret"):
                    pass
            # rate_limited: 3 s of audio at once against a 1 s burst
            for _ in range(150):
                await session.send_audio(bytes(640))
            frames = await collect_until(session, lambda fs: bool(of_type(fs, "error")), timeout=5)
            assert of_type(frames, "error")[0]["code"] == "rate_limited"
        assert httpx.get(f"{strict.http}/readyz").status_code == 200


async def test_oversized_message_closes_only_that_connection_with_1009(server) -> None:
    async with connect(server.url) as healthy, connect(server.url) as greedy:
        await greedy.websocket.send(packed({"type": "audio", "pcm": bytes(2 << 20)}))  # 2 MiB > 1 MiB limit
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(greedy.receive(), 5)
        assert greedy.websocket.close_code == 1009
        await still_transcribes(healthy)
