"""Wake phrases, filtering and script conversion through a real server on the tone model.

The tone model hears the tone language exactly, so wake handling is exact and deterministic:
"ABC" is the wake phrase, "ABC打开车门" the wake phrase in one breath with a command. Turns end
on silence alone here (``turn.model: null``), after ``turn.wait_ms``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kitt_stt.client.session import connect
from tests.helpers import collect_until, commits, run_server, send_pcm, silence, tone_pcm

WAKE = {"phrases": ["ABC"], "mode": "detect"}


@pytest.fixture(scope="module")
def wake_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path):
    overrides = {"turn": {"model": None, "wait_ms": 600}, "interim": {"enabled": True}}
    with run_server(tmp_path_factory.mktemp("wake"), model_cache, overrides) as server:
        yield server


def of_type(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [frame for frame in frames if frame["type"] == kind]


async def say(session, pcm: bytes, seat: str = "s") -> None:
    """At twice real time: a turn (600 ms of wall-clock silence) ends within 1200 ms of audio."""
    await send_pcm(session, pcm, seat=seat, realtime_factor=2.0)


def turn_over(seat: str = "s", count: int = 1):
    """Until ``count`` turns of the seat were decided (committed or filtered)."""
    return lambda frames: len([f for f in frames if f["type"] in ("commit", "filtered") and f["seat"] == seat]) >= count


async def test_wake_phrase_in_one_breath_with_the_command(wake_server) -> None:
    async with connect(wake_server.url) as session:
        await session.start(wake=WAKE)
        await say(session, tone_pcm("ABC打开车门", tail_ms=1200))
        frames = await collect_until(session, turn_over())
    [wake] = of_type(frames, "wake")
    [final] = of_type(frames, "final")
    [commit] = commits(frames)
    assert wake == {"type": "wake", "seat": "s", "segment_id": 1, "phrase": "ABC", "text": "ABC",
                    "audio_ms": wake["audio_ms"]} and wake["audio_ms"] > 0
    assert frames.index(wake) < frames.index(final)  # as soon as it shows: an interim or the final
    assert final["text"] == "打开车门" and final["wake"] == {"phrase": "ABC", "text": "ABC"}
    assert all(not interim["text"].startswith("ABC") for interim in of_type(frames, "interim"))
    assert commit["text"] == "打开车门"
    assert commit["metadata"]["wake"] == {"woken": True, "phrase": "ABC", "follow_up": False}


async def test_repeated_wake_phrases_are_all_stripped(wake_server) -> None:
    async with connect(wake_server.url) as session:
        await session.start(wake=WAKE)
        await say(session, tone_pcm("ABCABC关窗", tail_ms=1200))
        frames = await collect_until(session, turn_over())
    assert of_type(frames, "final")[0]["text"] == "关窗" and commits(frames)[0]["text"] == "关窗"
    assert len(of_type(frames, "wake")) == 1


async def test_wake_phrase_alone_then_the_command_in_the_same_turn(wake_server) -> None:
    async with connect(wake_server.url) as session:
        await session.start(wake=WAKE)
        # a pause that ends the segment (300 ms) but not the turn (600 ms)
        await say(session, tone_pcm("ABC", tail_ms=450) + tone_pcm("打开车门", lead_ms=0, tail_ms=1200))
        frames = await collect_until(session, turn_over())
    first, second = of_type(frames, "final")
    assert first["text"] == "" and first["wake"] == {"phrase": "ABC", "text": "ABC"}
    assert second["text"] == "打开车门" and second["wake"] is None
    [commit] = commits(frames)
    assert commit["text"] == "打开车门" and commit["segment_ids"] == [1, 2]
    assert commit["metadata"]["wake"] == {"woken": True, "phrase": "ABC", "follow_up": False}
    assert len(of_type(frames, "wake")) == 1


async def test_required_mode_filters_what_was_not_addressed_and_follows_up(wake_server) -> None:
    required = {"phrases": ["ABC"], "mode": "required", "follow_up_ms": 2500}
    async with connect(wake_server.url) as session:
        await session.start(wake=required)
        await say(session, tone_pcm("打开车门", tail_ms=1600))  # passengers talking: filtered
        frames = await collect_until(session, turn_over(count=1))
        await say(session, tone_pcm("ABC", tail_ms=1600))  # the wake phrase alone: no commit
        await say(session, tone_pcm("关窗", tail_ms=1600))  # within follow_up_ms of it: woken
        frames += await collect_until(session, turn_over(count=1))
        await say(session, tone_pcm("车门", tail_ms=1600))  # within follow_up_ms of that woken commit
        frames += await collect_until(session, turn_over(count=1))
        await say(session, silence(3000) + tone_pcm("开窗", tail_ms=1600))  # after the window closed
        frames += await collect_until(session, turn_over(count=1))
    decided = [f for f in frames if f["type"] in ("commit", "filtered")]
    assert [(f["type"], f["text"]) for f in decided] == [
        ("filtered", "打开车门"), ("commit", "关窗"), ("commit", "车门"), ("filtered", "开窗")]
    filtered = decided[0]
    assert filtered == {"type": "filtered", "seat": "s", "turn_id": 1, "segment_ids": [1], "text": "打开车门",
                        "reason": "no_wake"}
    assert [f["turn_id"] for f in decided] == [1, 2, 3, 4]  # the wake-only turn took no id
    assert decided[1]["metadata"]["wake"] == {"woken": True, "phrase": "ABC", "follow_up": True}
    assert decided[2]["metadata"]["wake"] == {"woken": True, "phrase": "ABC", "follow_up": True}
    assert [w["segment_id"] for w in of_type(frames, "wake")] == [2]  # the wake-only turn's own frame


async def test_wake_off_by_default_and_settings_are_checked(wake_server) -> None:
    async with connect(wake_server.url) as session:
        await say(session, tone_pcm("ABC打开车门", tail_ms=1200))
        frames = await collect_until(session, turn_over())
        assert commits(frames)[0]["text"] == "ABC打开车门" and "wake" not in commits(frames)[0]["metadata"]
        assert of_type(frames, "final")[0]["wake"] is None and not of_type(frames, "wake")
        for bad, message in (({"mode": "required"}, "at least one phrase"),
                             ({"phrases": ["A" * 33], "mode": "detect"}, "1-32 characters"),
                             ({"phrases": [], "mode": "loud"}, "mode")):
            await session.configure(wake=bad)
            [error] = await collect_until(session, lambda fs: bool(of_type(fs, "error")))
            assert error["code"] == "bad_field" and message in error["message"] and not error["fatal"]
            assert "wake" in error["message"] and "wake: wake: " not in error["message"]
            assert "Value error" not in error["message"]


@pytest.mark.parametrize(("script", "expected"), [("traditional", "打開車門"), ("as_is", "打开车门")])
async def test_script_conversion_per_session(wake_server, script: str, expected: str) -> None:
    async with connect(wake_server.url) as session:
        await session.start(text={"script": script})
        await say(session, tone_pcm("打开车门", tail_ms=1200))
        frames = await collect_until(session, turn_over())
    assert of_type(frames, "final")[0]["text"] == expected and commits(frames)[0]["text"] == expected


def test_wake_eval_matrix_passes_exactly_on_the_tone_model(model_cache: Path) -> None:
    """The evaluation tool itself, on the settings where every case must pass exactly.  One process
    per setting, side by side: the tool streams in real time, so the two runs mostly wait."""
    import subprocess
    import sys

    settings = ("tone-detect", "tone-required")
    runs = {setting: subprocess.Popen([sys.executable, "utils/performance/wake_eval.py", "--settings", setting,
                                       "--repeats", "1", "--cache", str(model_cache)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for setting in settings}
    try:
        outputs = {setting: process.communicate(timeout=300) for setting, process in runs.items()}
    finally:
        for process in runs.values():
            process.kill()
    for setting, (stdout, stderr) in outputs.items():
        assert runs[setting].returncode == 0, stderr
        assert f"{setting} ('ABC'): 4/4 passed, 4 decided right, 0 false wakes, 0 missed wakes" in stdout, stdout
