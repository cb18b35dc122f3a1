"""Rollouts and hostile clients against a real server: lossless drain, admission, idle timeout,
per-address limits, secrets kept out of logs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import Any

import httpx
import pytest
import websockets

from kitt_stt.client.session import SttSession, connect
from tests.helpers import FRAME_BYTES, collect_until, commits, frames_of, of_type, run_server, send_pcm, tone_pcm


async def stream_until_closed(session: SttSession, seats: list[str], pcm: bytes) -> None:
    """Send 20 ms frames for every seat in real time, looping the speech, as a car does, until
    the server closes the socket."""
    frames = frames_of(pcm)
    started = time.monotonic()
    index = 0
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            for seat in seats:
                await session.send_audio(frames[index % len(frames)], seat=seat)
            index += 1
            delay = started + index * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)


async def receive_all(session: SttSession, into: list[dict[str, Any]]) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            into.append(await session.receive())


async def test_sigterm_while_clients_keep_streaming_loses_nothing(tmp_path, model_cache) -> None:
    speech = tone_pcm("打开车门打开车门打开车门打开车门", lead_ms=200, tail_ms=0)
    seats = {0: ["driver", "passenger"], 1: ["rear left", "rear right"]}
    # the same speech on every seat is one voice to seat arbitration: off, every seat must decode here
    with run_server(tmp_path, model_cache, {"vad": {"silence_ms": 2000, "arbitration": False}}) as doomed:
        async with connect(doomed.url) as first, connect(doomed.url) as second:
            sessions = [first, second]
            received: list[list[dict[str, Any]]] = [[], []]
            receivers = [asyncio.create_task(receive_all(s, received[n])) for n, s in enumerate(sessions)]
            senders = [asyncio.create_task(stream_until_closed(s, seats[n], speech)) for n, s in enumerate(sessions)]
            deadline = time.monotonic() + 15
            while sum(len(of_type(r, "speech_start")) for r in received) < 4 or \
                    any(not of_type(r, "interim") for r in received):
                assert time.monotonic() < deadline, received
                await asyncio.sleep(0.05)
            doomed.process.send_signal(signal.SIGTERM)  # mid-utterance on every seat
            await asyncio.sleep(0.05)
            with pytest.raises((ConnectionError, OSError, websockets.InvalidHandshake)):
                async with connect(doomed.url, open_timeout=3):
                    pass  # no new session while draining (refused, or the server is already gone)
            await asyncio.wait_for(asyncio.gather(*receivers, *senders), 20)
            close_codes = [s.websocket.close_code for s in sessions]
        assert await asyncio.to_thread(doomed.process.wait, 20) == 0
    assert close_codes == [1000, 1000]
    for frames, names in zip(received, seats.values(), strict=True):
        for seat in names:
            starts = [f["segment_id"] for f in of_type(frames, "speech_start", seat)]
            finals = of_type(frames, "final", seat)
            assert starts and [f["segment_id"] for f in finals] == starts, (seat, frames)
            assert finals[-1]["end_reason"] == "stop" and set(finals[-1]["text"]) <= set("打开车门")
            assert finals[-1]["text"], finals[-1]
            [commit] = commits(frames, seat)
            assert commit["metadata"]["eot"]["decision"]["reason"] == "stop"
            assert commit["segment_ids"] == starts
            assert commit["text"] == "".join(f["text"] for f in finals)


async def test_a_flooding_client_does_not_starve_another_connections_final(tmp_path, model_cache) -> None:
    # message pacing off here (tested below): this test is about decode admission and fairness
    overrides = {"server": {"segment_starts": {"per_s": 2.0, "burst": 5}, "max_pending_decodes": 8,
                            "max_messages_per_s": 1_000_000}}
    with run_server(tmp_path, model_cache, overrides) as shared:
        async with connect(shared.url) as flooder, connect(shared.url) as victim:
            flood_frames: list[dict[str, Any]] = []
            stop = asyncio.Event()
            blip = frames_of(tone_pcm("A", lead_ms=0, tail_ms=0))[2]

            async def flood() -> None:
                while not stop.is_set():
                    for seat in range(8):
                        name = f"s{seat}"
                        await flooder.vad("start", seat=name)
                        await flooder.send_audio(blip, seat=name)
                        await flooder.vad("stop", seat=name)
                        await flooder.finalize(name)
                    await asyncio.sleep(0)

            receiver = asyncio.create_task(receive_all(flooder, flood_frames))
            flood_began = time.monotonic()
            flooding = asyncio.create_task(flood())
            await asyncio.sleep(1.0)
            await send_pcm(victim, tone_pcm("打开车门", tail_ms=0), realtime_factor=5)
            await victim.finalize()
            started = time.monotonic()
            frames = await collect_until(victim, lambda fs: bool(commits(fs)), timeout=10)
            waited = time.monotonic() - started
            stop.set()
            await flooding
            await flooder.ping("after")
            deadline = time.monotonic() + 10
            while not of_type(flood_frames, "pong"):
                assert time.monotonic() < deadline, "the flooder's session did not survive"
                await asyncio.sleep(0.05)
            flood_s = time.monotonic() - flood_began  # the server has handled every flood frame by the pong
            receiver.cancel()
        assert [f["text"] for f in of_type(frames, "final")] == ["打开车门"]
        assert waited < 5.0
        codes = {f["code"] for f in of_type(flood_frames, "error")}
        assert codes and codes <= {"rate_limited", "overloaded"}, codes
        assert not any(f["fatal"] for f in of_type(flood_frames, "error"))
        starts = [(f["seat"], f["segment_id"]) for f in of_type(flood_frames, "speech_start")]
        finals = [(f["seat"], f["segment_id"]) for f in of_type(flood_frames, "final")]
        assert sorted(starts) == sorted(finals)  # every admitted segment got its final
        assert len(starts) <= 8 * (5 + 2.0 * flood_s + 1)  # the budget held: burst plus refill over the run


async def test_a_connection_is_read_at_most_max_messages_per_s(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"server": {"max_messages_per_s": 500}}) as server:
        async with connect(server.url) as hasty, connect(server.url) as other:
            started = time.monotonic()
            for n in range(1500):  # a one-second burst, then 1000 more at 500/s: ~2 s to read
                await hasty.ping(n)
            await other.ping("other")
            assert (await asyncio.wait_for(other.receive(), 1.0))["id"] == "other"  # not stuck behind it
            pongs = await collect_until(hasty, lambda fs: len(fs) == 1500, timeout=15)
            elapsed = time.monotonic() - started
    assert [p["id"] for p in pongs] == list(range(1500))  # slowed down, nothing dropped
    assert 1.6 <= elapsed < 6.0, elapsed


async def test_a_silent_session_is_closed_after_the_idle_timeout(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"server": {"idle_timeout_s": 1.0}}) as server:
        async with connect(server.url) as silent, connect(server.url) as pinging:
            await silent.vad("start")  # a held segment, then the client falls silent mid-sentence
            await send_pcm(silent, tone_pcm("打开", tail_ms=0))
            started = time.monotonic()
            for n in range(6):  # 1.5 s of pings every 0.25 s keep a session open
                await pinging.ping(n)
                await asyncio.sleep(0.25)
            frames: list[dict[str, Any]] = []
            await asyncio.wait_for(receive_all(silent, frames), 5)
            assert 0.9 <= time.monotonic() - started < 3.0
            assert silent.websocket.close_code == 1008
            assert [f["type"] for f in frames][-3:] == ["final", "commit", "error"]  # flushed, then told why
            assert frames[-3]["text"] == "打开" and frames[-3]["end_reason"] == "stop"
            assert frames[-1]["code"] == "idle_timeout" and frames[-1]["fatal"] is True
            await send_pcm(pinging, tone_pcm("车门", tail_ms=0))
            await pinging.finalize()
            got = await collect_until(pinging, lambda fs: bool(commits(fs)), timeout=10)
            assert [f["text"] for f in of_type(got, "final")] == ["车门"]


async def test_connections_per_address_are_capped(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"server": {"max_connections_per_client_ip": 1}}) as server:
        async with connect(server.url):
            with pytest.raises(ConnectionError, match="max_connections_per_client_ip"):
                async with connect(server.url):
                    pass
        async with connect(server.url):  # the slot is free again once the first session ended
            pass


async def test_tokens_stay_out_of_logs_and_metrics_can_require_one(tmp_path, model_cache) -> None:
    token = "t0ken-9f8e7d"
    with run_server(tmp_path, model_cache, {"server": {"auth_token": token, "metrics_auth": True}}) as server:
        async with connect(f"{server.url}?token={token}"):
            pass
        with pytest.raises(websockets.InvalidStatus):
            async with connect(f"{server.url}?token=wrong-{token}"):
                pass
        assert httpx.get(f"{server.http}/metrics").status_code == 401
        assert httpx.get(f"{server.http}/metrics", headers={"Authorization": "Bearer nope"}).status_code == 403
        scraped = httpx.get(f"{server.http}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert scraped.status_code == 200 and "kitt_" in scraped.text
        assert httpx.get(f"{server.http}/readyz?token={token}").status_code == 200  # an HTTP access line too
        await asyncio.sleep(0.3)
        log = server.log()
    assert "WebSocket /stt/sensevoice?token=[redacted]" in log and "/readyz?token=[redacted]" in log
    assert token not in log and "Logging error" not in log


async def test_dropped_audio_keeps_the_seat_clock_on_the_clients(tmp_path, model_cache) -> None:
    overrides = {"server": {"rate_limit": {"realtime_factor": 1.0, "burst_ms": 1000}}}
    with run_server(tmp_path, model_cache, overrides) as strict:
        async with connect(strict.url) as session:
            for _ in range(150):  # 3 s of silence at once: ~2 s of it is over the budget and dropped
                await session.send_audio(bytes(FRAME_BYTES))
            await asyncio.sleep(1.2)  # the budget refills
            await send_pcm(session, tone_pcm("车门", lead_ms=300, tail_ms=600), realtime_factor=1.0)
            frames = await collect_until(session, lambda fs: bool(of_type(fs, "final")), timeout=10)
    [start] = of_type(frames, "speech_start")
    assert 3000 + 300 - 120 <= start["audio_ms"] <= 3000 + 300 + 60, start  # the client's clock, not 1300
    assert of_type(frames, "error")[0]["code"] == "rate_limited"


async def test_a_session_can_turn_interims_on_when_the_server_default_is_off(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"interim": {"enabled": False}}) as server:
        async with connect(server.url) as session:
            await session.start(interim=True)
            await send_pcm(session, tone_pcm("打开车门", burst_ms=250, tail_ms=0), realtime_factor=2)
            await session.finalize()
            frames = await collect_until(session, lambda fs: bool(commits(fs)), timeout=10)
    assert of_type(frames, "interim")
