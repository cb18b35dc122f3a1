"""Turn-taking through a real server with the real end-of-turn model: eager and resumed events,
holding a turn whose words end mid-phrase, and finals that need no decode of their own.

The model's probability on tone speech is not under the test's control, so the thresholds are
set at the ends of the scale: ``threshold: 1.0`` means the model never commits (every decision
waits and, for eager sessions, is announced), ``threshold: 0.0`` means it always does.
"""

from __future__ import annotations

from pathlib import Path

from kitt_stt.client.session import connect
from tests.helpers import collect_until, commits, run_server, send_pcm, silence, tone_pcm


def of_seat(frames: list[dict], seat: str) -> list[dict]:
    return [frame for frame in frames if frame.get("seat") == seat]


async def test_eager_resumed_and_commit_in_order(tmp_path: Path, model_cache: Path, turnsense_dir: Path) -> None:
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 1.0, "eager_threshold": 0.0,
                          "wait_ms": 1500}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with connect(server.url) as session:
            await session.start(eager=True)
            # a phrase, a pause long enough to end the segment (300 ms) but shorter than the wait,
            # then the rest: one turn of two segments
            pcm = tone_pcm("打开", tail_ms=900) + tone_pcm("车门", lead_ms=0, tail_ms=400)
            await send_pcm(session, pcm, seat="driver", realtime_factor=1.0)
            await send_pcm(session, silence(2000), seat="driver", realtime_factor=1.0)
            frames = await collect_until(session, lambda fs: commits(fs, "driver"), timeout=15)
    kinds = [(f["type"], f.get("segment_id"), f.get("turn_id")) for f in of_seat(frames, "driver")
             if f["type"] != "interim"]
    assert kinds == [
        ("speech_start", 1, None), ("final", 1, None), ("turn_eager", None, 1), ("turn_resumed", None, 1),
        ("speech_start", 2, None), ("final", 2, None), ("turn_eager", None, 1), ("commit", None, 1),
    ]
    eager = [f for f in frames if f["type"] == "turn_eager"]
    assert [f["text"] for f in eager] == ["打开", "打开车门"]
    assert all(0.0 <= f["probability"] < 1.0 for f in eager)
    [commit] = commits(frames)
    assert commit["text"] == "打开车门" and commit["segment_ids"] == [1, 2]
    assert commit["metadata"]["eot"]["decision"]["reason"] == "timeout"
    # each segment ended in a pause that had already closed its last chunk: no tail decode
    finals = [f for f in frames if f["type"] == "final"]
    assert [f["timing"]["tail_audio_ms"] for f in finals] == [0, 0]


async def test_sessions_get_no_eager_frames_unless_they_ask(tmp_path: Path, model_cache: Path,
                                                            turnsense_dir: Path) -> None:
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 1.0, "eager_threshold": 0.0,
                          "wait_ms": 400}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with connect(server.url) as session:
            await send_pcm(session, tone_pcm("打开车门", tail_ms=1500), seat="s", realtime_factor=1.0)
            frames = await collect_until(session, lambda fs: commits(fs, "s"), timeout=15)
            await session.configure(eager=True)  # from the next decision on
            await send_pcm(session, tone_pcm("关窗", tail_ms=1500), seat="s", realtime_factor=1.0)
            frames += await collect_until(session, lambda fs: commits(fs, "s"), timeout=15)
    kinds = [f["type"] for f in frames if f["type"] in ("turn_eager", "commit")]
    assert kinds == ["commit", "turn_eager", "commit"]


async def test_words_that_end_mid_phrase_hold_the_turn(tmp_path: Path, model_cache: Path,
                                                       turnsense_dir: Path) -> None:
    """The tone model writes "A" as a word of its own after Han text: English's article "a", so
    "打开A" ends where no request can; "打开车门" does not. The model is made always confident."""
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 0.0, "wait_ms": 1500,
                          "unfinished_wait_ms": 800}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with connect(server.url) as session:
            await send_pcm(session, tone_pcm("打开车门", tail_ms=1200), seat="complete", realtime_factor=1.0)
            await send_pcm(session, tone_pcm("打开A", tail_ms=1800), seat="unfinished", realtime_factor=1.0)
            frames = await collect_until(session, lambda fs: commits(fs, "unfinished"), timeout=15)
    complete = commits(frames, "complete")[0]["metadata"]["eot"]["decision"]
    held = commits(frames, "unfinished")[0]["metadata"]["eot"]["decision"]
    assert complete["reason"] == "model" and complete["text_ending"] == "open"
    assert held["reason"] == "timeout" and held["text_ending"] == "unfinished" and held["threshold"] > 1.0
    assert held["wait_ms"] >= 800
