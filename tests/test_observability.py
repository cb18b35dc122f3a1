"""Trace, metrics, debug logs and buffer accounting, over a real server."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from pathlib import Path

import httpx
import pytest

from kitt_stt.client.session import connect
from kitt_stt.config.loader import ConfigError, load_config
from kitt_stt.observability.logbuffer import RecentLogBuffer
from kitt_stt.observability.trace import Tracer, Track
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, tone_pcm

TOKEN = "debug-s3cret"
SPAN_KINDS = {"ws.receive", "ws.send", "vad.segment", "scheduler.queue_wait", "asr.features", "asr.decode",
              "asr.postprocess", "turnsense.features", "turnsense.model"}


def metric(text: str, name: str, labels: str = "") -> float:
    """Value of one sample in Prometheus text format (0 when absent)."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture
def traced_server(tmp_path: Path, model_cache: Path, turnsense_dir: Path):
    overrides = {
        "tracing": {"enabled": True, "path": str(tmp_path / "trace" / "t.json.gz"), "flush_interval_s": 0.3},
        "debug": {"trace_enabled": True, "logs_enabled": True, "token": TOKEN},
        "turn": {"model": "turnsense", "policy": "turnsense", "threshold": 0.5},
    }
    with run_server(tmp_path, model_cache, overrides) as server:
        yield server


async def test_trace_has_every_span_kind_and_matches_the_frames(traced_server, tmp_path: Path) -> None:
    sent = 0
    async with connect(traced_server.url) as session:
        session_id = session.ready["session_id"]
        for seat, text in (("driver", "打开车门"), ("passenger", "ABC")):
            pcm = tone_pcm(text, tail_ms=700)
            await send_pcm(session, pcm, seat=seat, realtime_factor=4.0)
            sent += len(pcm) // 640
        frames = await collect_until(session, lambda fs: {c["seat"] for c in commits(fs)} == {"driver", "passenger"})
        await session.close()
        sent += 1
        frames += [frame async for frame in session.frames()]
    received = len(frames) + 1  # + the ready frame
    response = httpx.get(f"{traced_server.http}/debug/trace", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    document = response.json()
    events = document["traceEvents"]
    for event in events:
        assert event["ph"] in {"X", "M"} and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert isinstance(event["ts"], int) and event["dur"] >= 0 and event["name"] and event["cat"]
    mine = [e for e in events if e["ph"] == "X" and e.get("args", {}).get("session") == session_id]
    kinds = {e["name"] for e in mine}
    assert kinds >= SPAN_KINDS, SPAN_KINDS - kinds
    count = {kind: sum(1 for e in mine if e["name"] == kind) for kind in SPAN_KINDS}
    finals = of_type(frames, "final")
    interims = of_type(frames, "interim")
    assert count["ws.send"] == received
    assert count["ws.receive"] == sent
    assert count["vad.segment"] == len(finals) == 2
    assert count["turnsense.model"] == len(finals)
    final_decodes = [e for e in mine if e["name"] == "asr.decode" and e["args"]["kind"] == "final"]
    chunk_decodes = [e for e in mine if e["name"] == "asr.decode" and e["args"]["kind"] == "chunk"]
    # a final decodes its tail only when the tail held speech; the rest of its pieces were chunks
    assert len(final_decodes) == sum(1 for f in finals if f["timing"]["tail_audio_ms"] > 0)
    assert len(chunk_decodes) == sum(f["timing"]["chunks"] for f in finals) - len(final_decodes) > 0
    interim_decodes = [e for e in mine if e["name"] == "asr.decode" and e["args"]["kind"] == "interim"]
    # identical interims are decoded but not sent; an interim while the open tail is only pause
    # needs no decode (its text is the closed chunks'), at most one such interim per closed chunk
    assert len(interims) <= len(interim_decodes) + len(chunk_decodes) and interim_decodes
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"seat driver", "seat passenger"} <= names or not any(e["ph"] == "M" for e in events)
    # the background writer produced a valid gzip JSON file with the same kinds of events
    path = tmp_path / "trace" / "t.json.gz"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists():
            written = json.loads(gzip.decompress(path.read_bytes()))
            if any(e.get("args", {}).get("session") == session_id for e in written["traceEvents"]):
                break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("trace file was not written")


async def test_debug_logs_need_the_token(traced_server, server) -> None:
    assert httpx.get(f"{server.http}/debug/logs").status_code == 404  # off by default
    assert httpx.get(f"{server.http}/debug/trace").status_code == 404
    url = f"{traced_server.http}/debug/logs"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}).status_code == 403
    response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    records = [json.loads(line) for line in response.text.splitlines() if line]
    assert any("warmed up" in record["message"] for record in records)


def test_debug_endpoints_cannot_be_enabled_without_a_token(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("debug:\n  logs_enabled: true\n")
    with pytest.raises(ConfigError, match=r"debug\.token"):
        load_config(path, env={})


def test_orin_config_keeps_debug_logs_off() -> None:
    config = load_config(Path(__file__).parent.parent / "config-k3s-orin.yaml", env={}).config
    assert config.debug.logs_enabled is False and config.debug.trace_enabled is False


def test_log_ring_is_capped_by_bytes_and_count() -> None:
    ring = RecentLogBuffer(max_bytes=20_000, max_records=50)
    logger = logging.getLogger("test.ring")
    logger.propagate = False
    logger.addHandler(ring)
    try:
        for index in range(200):
            logger.warning("record %d %s", index, "x" * 100_000)  # huge: truncated to 4 KB each
        assert ring.nbytes <= 20_000
        lines = ring.lines()
        assert 0 < len(lines) <= 50
        assert json.loads(lines[-1])["message"].startswith("record 199")
        for index in range(200):
            logger.warning("small %d", index)
        assert len(ring.lines()) == 50 and ring.nbytes <= 20_000
    finally:
        logger.removeHandler(ring)


def test_tracer_retention_bounded_by_count_and_bytes() -> None:
    by_count = Tracer(max_events=100, max_bytes=1 << 30)
    by_bytes = Tracer(max_events=1_000_000, max_bytes=20_000)
    for index in range(1000):
        for tracer in (by_count, by_bytes):
            tracer.add("asr.decode", "asr", index, 1, Track(1, 1), {"session": "s" * 32, "segment": index})
    assert by_count.size[0] == 100
    events, nbytes = by_bytes.size
    assert nbytes <= 20_000 and 0 < events < 1000
    rendered = by_bytes.render_snapshot()
    assert len(rendered) <= 20_000  # the estimate is not below the real size
    assert json.loads(rendered)["traceEvents"][-1]["args"]["segment"] == 999


async def test_metrics_move_and_buffers_return_to_zero(server) -> None:
    before = httpx.get(f"{server.http}/metrics").text
    for name in ("kitt_live_sessions", "kitt_seats", "kitt_buffered_bytes", "kitt_scheduler_queue_depth",
                 "kitt_model_load_seconds", "kitt_warm_up_seconds", "process_resident_memory_bytes"):
        assert f"\n{name} " in "\n" + before, name
    async with connect(server.url) as session:
        await send_pcm(session, tone_pcm("打开车门", tail_ms=0), seat="driver")
        await session.ping("sync")
        await collect_until(session, lambda fs: bool(of_type(fs, "pong")))
        during = httpx.get(f"{server.http}/metrics").text
        assert metric(during, "kitt_live_sessions") >= 1
        assert metric(during, "kitt_buffered_bytes") > 0  # the open segment's audio
        await session.send({"type": "audio", "pcm": b"\x00" * 100})  # one bad_audio error
        await session.close()
        frames = [frame async for frame in session.frames()]
    assert commits(frames)
    after = httpx.get(f"{server.http}/metrics").text
    assert metric(after, "kitt_buffered_bytes") == 0
    assert metric(after, "kitt_live_sessions") == 0 and metric(after, "kitt_seats") == 0
    grew = [
        ("kitt_frames_in_total", 'type="audio"'),
        ("kitt_frames_out_total", 'type="final"'),
        ("kitt_commits_total", 'reason="stop"'),
        ("kitt_errors_total", 'code="bad_audio"'),
        ("kitt_decode_seconds_count", 'kind="final"'),
        ("kitt_scheduler_queue_wait_seconds_count", 'kind="final"'),
        ("kitt_final_latency_seconds_count", ""),
        ("kitt_eot_latency_seconds_count", ""),
        ("kitt_sessions_total", ""),
        ("kitt_audio_seconds_total", ""),
    ]
    for name, labels in grew:
        assert metric(after, name, labels) > metric(before, name, labels), (name, labels)


def test_log_records_carry_session_seat_segment_and_turn_ids() -> None:
    from kitt_stt.observability.logbuffer import seat_id, session_id

    ring = RecentLogBuffer(max_bytes=10_000, max_records=10)
    logger = logging.getLogger("test.ids")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(ring)
    session_token, seat_token = session_id.set("sess-1"), seat_id.set("driver")
    try:
        logger.debug("turn committed", extra={"turn": 3, "segment": 7})
    finally:
        session_id.reset(session_token)
        seat_id.reset(seat_token)
        logger.removeHandler(ring)
    record = json.loads(ring.lines()[-1])
    assert (record["session"], record["seat"], record["segment"], record["turn"]) == ("sess-1", "driver", 7, 3)
