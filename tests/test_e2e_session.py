"""End to end through a real uvicorn server, a real WebSocket client and real msgpack."""

from __future__ import annotations

import asyncio

import pytest

from kitt_stt.client.session import connect
from tests.helpers import (
    collect_until,
    commits,
    of_type,
    run_server,
    send_pcm,
    silence,
    tone_pcm,
)

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def check_seat_ordering(frames: list[dict], seat: str) -> None:
    """The protocol's per-seat ordering guarantees."""
    started: set[int] = set()
    finals: dict[int, str] = {}
    last_segment = last_turn = 0
    for frame in frames:
        if frame.get("seat") != seat:
            continue
        kind = frame["type"]
        if kind == "speech_start":
            assert frame["segment_id"] > last_segment
            last_segment = frame["segment_id"]
            started.add(frame["segment_id"])
        elif kind == "interim":
            assert frame["segment_id"] in started, "interim before speech_start"
            assert frame["segment_id"] not in finals, "interim after its final"
        elif kind == "final":
            assert frame["segment_id"] in started
            assert frame["segment_id"] not in finals, "two finals for one segment"
            finals[frame["segment_id"]] = frame["text"]
        elif kind == "commit":
            assert frame["turn_id"] > last_turn
            last_turn = frame["turn_id"]
            assert all(segment in finals for segment in frame["segment_ids"]), "commit before its finals"
    assert started == set(finals), "every segment with speech gets exactly one final"


async def test_one_seat_speech_start_interim_final_commit(server) -> None:
    async with connect(server.url) as session:
        assert session.ready["protocol"] == 1
        assert session.ready["model"] == {"name": "tone", "kind": "tone", "provider": "cpu", "hotwords": True,
                                         "words": True}
        pcm = tone_pcm("打开车门", burst_ms=250, gap_ms=120, tail_ms=600)
        sender = asyncio.create_task(send_pcm(session, pcm, realtime_factor=2.0))
        frames = await collect_until(session, lambda fs: bool(commits(fs)))
        await sender
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "speech_start"
    assert "interim" in kinds
    finals = of_type(frames, "final")
    assert [f["text"] for f in finals] == ["打开车门"]
    final = finals[0]
    assert (final["lang"], final["emotion"], final["event"]) == ("zh", "NEUTRAL", "Speech")
    assert final["end_reason"] == "silence"
    assert 0 < final["start_ms"] < final["end_ms"]
    assert final["server_latency_ms"] >= 0 and "decode_ms" in final["timing"]
    commit = commits(frames)[0]
    assert commit["text"] == "打开车门" and commit["segment_ids"] == [final["segment_id"]]
    decision = commit["metadata"]["eot"]["decision"]
    assert decision["reason"] == "timeout"
    assert decision["wait_ms"] >= 300 * 0.9
    assert set(decision) >= {"reason", "probability", "threshold", "wait_ms", "model_ms"}
    check_seat_ordering(frames, "default")


SEAT_TEXTS = {"driver": "打开车门", "passenger": "关车窗", "rear_left": "ABCDEF", "rear_right": "门窗AB"}


async def speak_seats(url: str, texts: dict[str, str], stagger_ms: int = 200) -> list[dict]:
    """All seats on one connection, starting ``stagger_ms`` apart so their speech overlaps."""
    async with connect(url) as session:
        pcms = {seat: silence(stagger_ms * index) + tone_pcm(text, tail_ms=700)
                for index, (seat, text) in enumerate(texts.items())}
        longest = max(len(pcm) for pcm in pcms.values())

        async def interleave() -> None:
            for offset in range(0, longest, 640):
                for seat, pcm in pcms.items():
                    if offset < len(pcm):
                        await session.send_audio(pcm[offset : offset + 640], seat=seat)
                await asyncio.sleep(0.005)

        sender = asyncio.create_task(interleave())
        frames = await collect_until(session, lambda fs: {c["seat"] for c in commits(fs)} == set(texts))
        await sender
    return frames


async def test_four_seats_one_connection_no_cross_talk(server) -> None:
    frames = await speak_seats(server.url, SEAT_TEXTS)
    for seat, text in SEAT_TEXTS.items():
        assert [f["text"] for f in of_type(frames, "final", seat)] == [text]
        assert [c["text"] for c in commits(frames, seat)] == [text]
        check_seat_ordering(frames, seat)


async def test_two_connections_concurrently(server) -> None:
    first = {"driver": "打开车门", "passenger": "ABC"}
    second = {"driver": "关车窗", "passenger": "DEF"}
    frames_a, frames_b = await asyncio.gather(speak_seats(server.url, first), speak_seats(server.url, second))
    for frames, texts in ((frames_a, first), (frames_b, second)):
        for seat, text in texts.items():
            assert [f["text"] for f in of_type(frames, "final", seat)] == [text]
            check_seat_ordering(frames, seat)


async def test_client_vad_stop_ends_segment_without_silence_timer(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("车门", tail_ms=0))
        await session.vad("stop")
        frames = await collect_until(session, lambda fs: bool(of_type(fs, "final")), timeout=5)
    final = of_type(frames, "final")[0]
    assert final["text"] == "车门"
    assert final["end_reason"] == "client"


async def test_client_vad_start_holds_segment_across_pauses(server) -> None:
    async with connect(server.url) as session:
        await session.vad("start")
        # a 600 ms pause would end the segment (silence_ms=300) unless the client holds it
        await send_pcm(session, tone_pcm("打开", tail_ms=600) + tone_pcm("车门", lead_ms=0, tail_ms=0))
        await session.vad("stop")
        frames = await collect_until(session, lambda fs: bool(commits(fs)))
    assert [f["text"] for f in of_type(frames, "final")] == ["打开车门"]


async def test_finalize_flushes_and_commits_now(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("ABC", tail_ms=0))
        await session.finalize()
        frames = await collect_until(session, lambda fs: bool(commits(fs)), timeout=5)
    assert [f["text"] for f in of_type(frames, "final")] == ["ABC"]
    assert of_type(frames, "final")[0]["end_reason"] == "finalize"
    assert commits(frames)[0]["metadata"]["eot"]["decision"]["reason"] == "finalize"


async def test_finalize_one_seat_leaves_the_other_open(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("AB", tail_ms=0), seat="driver")
        await send_pcm(session, tone_pcm("CD", tail_ms=0), seat="passenger")
        await session.finalize("driver")
        frames = await collect_until(session, lambda fs: bool(commits(fs, "driver")), timeout=5)
        assert of_type(frames, "final", "passenger") == []
        await send_pcm(session, silence(600), seat="passenger")
        frames += await collect_until(session, lambda fs: bool(commits(fs, "passenger")), timeout=5)
    assert [c["text"] for c in commits(frames)] == ["AB", "CD"]


async def test_close_flushes_every_seat_then_closes_normally(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("打开", tail_ms=0), seat="driver")
        await send_pcm(session, tone_pcm("EF", tail_ms=0), seat="passenger")
        await session.close()
        frames = [frame async for frame in session.frames()]
        assert session.websocket.close_code == 1000
    assert {(c["seat"], c["text"]) for c in commits(frames)} == {("driver", "打开"), ("passenger", "EF")}
    assert all(c["metadata"]["eot"]["decision"]["reason"] == "stop" for c in commits(frames))


async def test_ping_pong(server) -> None:
    async with connect(server.url) as session:
        await session.ping(41)
        await session.ping("abc")
        frames = await collect_until(session, lambda fs: len(of_type(fs, "pong")) == 2, timeout=5)
    assert [f["id"] for f in of_type(frames, "pong")] == [41, "abc"]


async def test_speech_resuming_during_wait_continues_the_turn(tmp_path, model_cache) -> None:
    # A 700 ms pause ends the segment (silence_ms=300) while the turn still waits (wait_ms=1500),
    # so the second segment joins the same turn and one commit names both.
    with run_server(tmp_path, model_cache, {"turn": {"wait_ms": 1500}}) as patient:
        async with connect(patient.url) as session:
            pcm = tone_pcm("打开", tail_ms=700) + tone_pcm("车门", lead_ms=0, tail_ms=600)
            sender = asyncio.create_task(send_pcm(session, pcm, realtime_factor=1.0))
            frames = await collect_until(session, lambda fs: bool(commits(fs)))
            await sender
    finals = of_type(frames, "final")
    assert [f["text"] for f in finals] == ["打开", "车门"]
    assert [c["text"] for c in commits(frames)] == ["打开车门"]
    assert commits(frames)[0]["segment_ids"] == [f["segment_id"] for f in finals]
    check_seat_ordering(frames, "default")


async def test_silence_only_yields_nothing(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, silence(1500))
        await session.ping("done")
        frames = await collect_until(session, lambda fs: bool(of_type(fs, "pong")), timeout=5)
    assert [f["type"] for f in frames] == ["pong"]


async def test_seat_names_in_any_script(server) -> None:
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("AB", tail_ms=0), seat="主驾")
        await session.finalize("主驾")
        frames = await collect_until(session, lambda fs: bool(commits(fs)), timeout=5)
    assert commits(frames)[0]["seat"] == "主驾" and commits(frames)[0]["text"] == "AB"


async def test_sixteen_connections_at_once_stay_apart(server) -> None:
    texts = ["打开车门", "关车窗", "ABC", "DEF", "门窗", "AB", "车门", "EF"]
    jobs = [speak_seats(server.url, {"driver": texts[i % 8], "passenger": texts[(i + 3) % 8]}, stagger_ms=60)
            for i in range(16)]
    results = await asyncio.gather(*jobs)
    for index, frames in enumerate(results):
        expected = {"driver": texts[index % 8], "passenger": texts[(index + 3) % 8]}
        for seat, text in expected.items():
            assert [f["text"] for f in of_type(frames, "final", seat)] == [text]
            check_seat_ordering(frames, seat)
