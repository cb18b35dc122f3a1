"""The framework-neutral pieces both adapters share (kitt_stt/integrations/link.py, turns.py); no extras needed."""

from __future__ import annotations

import importlib
import sys

import pytest

from kitt_stt.integrations.link import (
    FRAME_BYTES,
    LinkOptions,
    Reframer,
    ReplayBuffer,
    backoff_delays,
    send_after_s,
)
from kitt_stt.integrations.turns import (
    Committed,
    Eager,
    Filtered,
    Partial,
    Resumed,
    ServerError,
    TurnStarted,
    TurnTracker,
)

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def test_reframer_cuts_any_chunking_into_20ms_frames() -> None:
    reframer = Reframer()
    pcm = bytes(range(256)) * 10  # 2560 bytes: 4 frames exactly
    frames = reframer.push(pcm[:100]) + reframer.push(pcm[100:1000]) + reframer.push(pcm[1000:2500])
    assert [len(frame) for frame in frames] == [FRAME_BYTES] * 3
    assert b"".join(frames) == pcm[:1920]
    tail = reframer.flush()
    assert tail == [pcm[1920:2500] + bytes(FRAME_BYTES - 580)] and reframer.flush() == []


def test_replay_keeps_the_turn_since_its_start_and_only_a_second_outside_one() -> None:
    replay = ReplayBuffer(max_ms=30_000, idle_keep_ms=1000)
    for index in range(200):  # 4 s of silence before anyone speaks
        replay.add(index.to_bytes(2, "big"))
    assert len(replay) == 50 and next(iter(replay)) == (150).to_bytes(2, "big")  # the last second
    replay.in_turn = True
    for index in range(200, 600):  # 8 s of turn
        replay.add(index.to_bytes(2, "big"))
    assert len(replay) == 450  # the second before the turn and all of it
    replay.committed()
    assert len(replay) == 0 and not replay.in_turn


def test_replay_never_exceeds_what_the_server_accepts_at_once() -> None:
    replay = ReplayBuffer(max_ms=30_000, idle_keep_ms=1000)
    replay.limit_to(10_000)  # ready.limits.burst_ms
    replay.in_turn = True
    for index in range(1000):
        replay.add(index.to_bytes(2, "big"))
    assert len(replay) == 450  # 9 s: within the 10 s burst, with room for the frames after it


def test_replay_keeps_everything_while_offline_and_hands_it_out_in_rounds() -> None:
    replay = ReplayBuffer(max_ms=30_000, idle_keep_ms=1000)
    replay.offline = True  # the socket is down between turns: no speech_start can come
    for index in range(200):
        replay.add(index.to_bytes(2, "big"))
    assert len(replay) == 200  # 4 s, not the last second
    first, position = replay.since(replay.oldest)
    assert len(first) == 200 and position == 200
    replay.add((200).to_bytes(2, "big"))  # live audio while the replay was being sent
    rest, position = replay.since(position)
    assert rest == [(200).to_bytes(2, "big")] and replay.since(position) == ([], 201)
    replay.offline = False
    replay.add((201).to_bytes(2, "big"))
    assert len(replay) == 50  # connected again, outside a turn: the last second


def test_a_buffer_is_paced_to_the_servers_limits() -> None:
    limits = {"realtime_factor": 4.0, "burst_ms": 10_000}
    assert send_after_s(0, limits) == 0.0 and send_after_s(450, limits) == 0.0  # 9 s: within the burst (90 %)
    assert send_after_s(1450, limits) == pytest.approx((1450 * 20 - 9000) / 1000 / 3.6)  # then 3.6 x real time


def test_backoff_doubles_to_its_cap_and_ends() -> None:
    assert list(backoff_delays(0.5, 8.0, 7)) == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_start_frame_carries_the_options() -> None:
    options = LinkOptions("ws://x/stt", seat="主驾", language="zh", hotwords=("车门:2",), token="t",
                          extra_start={"wake": {"phrases": ["你好小凯"], "mode": "detect"}})
    frame = options.start_frame()
    assert frame["seats"] == ["主驾"] and frame["language"] == "zh" and frame["hotwords"] == ["车门:2"]
    assert frame["eager"] is True and frame["wake"]["mode"] == "detect"
    assert "language" not in LinkOptions("ws://x").start_frame()  # the server's default
    assert options.headers() == {"Authorization": "Bearer t"}


def test_tracker_turns_server_frames_into_turn_events() -> None:
    replay = ReplayBuffer(30_000, 1000)
    tracker = TurnTracker("driver", replay)
    seat = {"seat": "driver"}
    stream = [
        {"type": "speech_start", "segment_id": 1, "audio_ms": 300, **seat},
        {"type": "interim", "text": "打开", **seat},
        {"type": "final", "text": "打开", "end_ms": 900, "lang": "zh", **seat},
        {"type": "turn_eager", "text": "打开", "probability": 0.6, **seat},
        {"type": "turn_resumed", "turn_id": 1, **seat},
        {"type": "speech_start", "segment_id": 2, "audio_ms": 1500, **seat},
        {"type": "interim", "text": "车", **seat},
        {"type": "speech_start", "segment_id": 1, "audio_ms": 0, "seat": "passenger"},  # another seat
        {"type": "final", "text": "车门", "end_ms": 2100, "lang": "zh", **seat},
        {"type": "commit", "text": "打开车门", "metadata": {"eot": {"decision": {"reason": "model"}}}, **seat},
    ]
    events = [event for frame in stream for event in tracker.on_frame(frame)]
    assert events[:-1] == [TurnStarted(300), Partial("打开"), Partial("打开"), Eager("打开", 0.6), Resumed("打开"),
                           Partial("打开车"), Partial("打开车门")]
    commit = events[-1]
    assert isinstance(commit, Committed) and commit.text == "打开车门" and commit.reason == "model"
    assert commit.words == ()  # this session's finals carried none
    assert (commit.start_ms, commit.end_ms, commit.language) == (300, 2100, "zh")
    assert not replay.in_turn
    assert tracker.on_frame({"type": "speech_start", "audio_ms": 5000, **seat}) == [TurnStarted(5000)]
    assert tracker.on_frame({"type": "filtered", "text": "聊天", **seat}) == [Filtered("聊天")]
    assert tracker.on_frame({"type": "error", "code": "rate_limited", "message": "slow down", "fatal": False}) == \
        [ServerError("rate_limited", "slow down", False)]


def test_a_replayed_turn_is_not_started_twice_and_keeps_no_stale_finals() -> None:
    replay = ReplayBuffer(30_000, 1000)
    tracker = TurnTracker("driver", replay)
    tracker.on_frame({"type": "speech_start", "audio_ms": 300, "seat": "driver"})
    tracker.on_frame({"type": "final", "text": "打开", "seat": "driver"})
    tracker.reconnected()  # the new connection hears the turn again from its start
    assert tracker.on_frame({"type": "speech_start", "audio_ms": 300, "seat": "driver"}) == []
    assert tracker.on_frame({"type": "final", "text": "打开", "seat": "driver"}) == [Partial("打开")]


def test_importing_the_package_imports_no_framework() -> None:
    saved = {name: module for name, module in sys.modules.items() if name.startswith("kitt_stt.integrations")}
    for name in saved:
        del sys.modules[name]
    try:
        before = {name for name in sys.modules if name.split(".")[0] in ("pipecat", "livekit")}
        for name in ("kitt_stt.integrations", "kitt_stt.integrations.link", "kitt_stt.integrations.turns"):
            importlib.import_module(name)
        after = {name for name in sys.modules if name.split(".")[0] in ("pipecat", "livekit")}
    finally:
        sys.modules.update(saved)  # the adapters imported earlier keep the classes they were built with
    assert after == before
