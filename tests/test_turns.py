"""The turn state machine and the end-of-turn policy, driven by an injected probability source."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
import pytest

from kitt_stt.audio.ring import SampleRing
from kitt_stt.pipeline.eot import HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.pipeline.turn_text import TextEnding, text_ending
from kitt_stt.pipeline.turn_tracker import TurnState, TurnTracker
from kitt_stt.text import TextStage
from kitt_stt.turnsense.model import TurnPrediction

WAIT_MS = 150
THRESHOLD = 0.7


@dataclass
class Harness:
    tracker: TurnTracker
    commits: list

    async def next_commit(self, timeout: float = 2.0) -> dict:
        deadline = time.monotonic() + timeout
        while not self.commits:
            assert time.monotonic() < deadline, "no commit"
            await asyncio.sleep(0.005)
        return self.commits.pop(0)


def harness(policy=None, max_duration_ms: int = 60_000, eager: bool = False) -> Harness:
    """A tracker whose frames all land in ``commits`` (commits, and turn_eager/turn_resumed when on)."""
    commits: list = []
    tracker = TurnTracker("s", policy or TurnSensePolicy(THRESHOLD, WAIT_MS),
                          lambda frame: commits.append(frame.model_dump()), finals_done=lambda: None,
                          max_duration_ms=max_duration_ms, eager=lambda: eager)
    return Harness(tracker, commits)


def prediction(probability: float | None, delay_s: float = 0.0) -> asyncio.Future:
    """A prediction future that resolves after ``delay_s`` (None -> the model failed)."""
    future = asyncio.get_running_loop().create_future()

    def settle() -> None:
        if probability is None:
            future.set_exception(RuntimeError("model failed"))
        else:
            future.set_result(TurnPrediction(probability, features_ms=1.0, model_ms=2.0))

    asyncio.get_running_loop().call_later(delay_s, settle)
    return future


def speak(h: Harness, segment_id: int, text: str, p: float | None, start_ms: int = 0, end_ms: int = 500,
          model_delay_s: float = 0.0) -> None:
    turn = h.tracker.begin_segment(segment_id, start_ms)
    turn.prediction = prediction(p, model_delay_s)
    h.tracker.segment_final(turn, segment_id, text, end_ms, time.perf_counter())


def decision(commit: dict) -> dict:
    return commit["metadata"]["eot"]["decision"]


@pytest.mark.parametrize(
    ("probability", "reason", "min_wait", "max_wait"),
    [
        (0.95, "model", 0, WAIT_MS * 0.5),  # confident: at once
        (THRESHOLD, "model", 0, WAIT_MS * 0.5),  # threshold is inclusive
        (0.69, "timeout", WAIT_MS * 0.9, WAIT_MS * 3),  # not confident: wait for silence
        (0.05, "timeout", WAIT_MS * 0.9, WAIT_MS * 3),
        (None, "timeout", WAIT_MS * 0.9, WAIT_MS * 3),  # model failed: still commits
    ],
)
async def test_waiting_ends_by_model_or_timeout(probability, reason, min_wait, max_wait) -> None:
    h = harness()
    speak(h, 1, "打开车门", probability)
    assert h.tracker.state is TurnState.WAITING
    commit = await h.next_commit()
    got = decision(commit)
    assert got["reason"] == reason
    assert got["probability"] == probability
    assert got["threshold"] == THRESHOLD
    assert min_wait <= got["wait_ms"] <= max_wait
    assert got["model_ms"] == (None if probability is None else 3.0)
    assert commit["text"] == "打开车门" and commit["turn_id"] == 1
    assert h.tracker.state is TurnState.IDLE


async def test_slow_model_commit_waits_for_model_not_longer() -> None:
    h = harness()
    speak(h, 1, "A", 0.9, model_delay_s=0.06)
    got = decision(await h.next_commit())
    assert got["reason"] == "model" and 50 <= got["wait_ms"] < WAIT_MS


async def test_speech_resuming_during_wait_continues_the_turn() -> None:
    h = harness()
    speak(h, 1, "打开", 0.1)
    await asyncio.sleep(WAIT_MS / 3000)
    turn = h.tracker.begin_segment(2, 900)
    assert h.tracker.state is TurnState.SPEAKING
    await asyncio.sleep(WAIT_MS * 1.5 / 1000)
    assert h.commits == []  # the old decision was cancelled
    turn.prediction = prediction(0.9)
    h.tracker.segment_final(turn, 2, "车门", 1400, time.perf_counter())
    commit = await h.next_commit()
    assert commit["text"] == "打开车门" and commit["segment_ids"] == [1, 2]
    assert decision(commit)["reason"] == "model"


@pytest.mark.parametrize("reason", ["finalize", "stop"])
async def test_flush_during_wait_commits_at_once(reason) -> None:
    from kitt_stt.pipeline.eot import CommitReason

    h = harness()
    speak(h, 1, "ABC", 0.1)
    task = h.tracker.flush(CommitReason(reason))
    assert task is not None
    await task
    commit = await h.next_commit()
    assert decision(commit)["reason"] == reason and decision(commit)["wait_ms"] < WAIT_MS
    await asyncio.sleep(WAIT_MS * 1.5 / 1000)
    assert h.commits == []  # the cancelled timeout does not commit twice


async def test_flush_with_nothing_said_commits_nothing() -> None:
    from kitt_stt.pipeline.eot import CommitReason

    h = harness()
    assert h.tracker.flush(CommitReason.FINALIZE) is None
    assert h.commits == []


async def test_max_duration_at_final() -> None:
    h = harness(max_duration_ms=2000)
    speak(h, 1, "ABCDEF", 0.1, start_ms=0, end_ms=2500)
    commit = await h.next_commit(timeout=0.5 * WAIT_MS / 1000 + 0.5)
    assert decision(commit)["reason"] == "max_duration"


async def test_max_duration_when_speech_goes_on() -> None:
    h = harness(max_duration_ms=2000)
    first = h.tracker.begin_segment(1, 0)
    first.prediction = prediction(0.1)
    h.tracker.segment_final(first, 1, "AB", 1000, time.perf_counter())  # waiting: p is low
    second = h.tracker.begin_segment(2, 1200)
    assert second is first  # under the limit: same turn
    h.tracker.segment_final(second, 2, "CD", 2600, time.perf_counter())
    commit = await h.next_commit(timeout=1.0)
    assert decision(commit)["reason"] == "max_duration" and commit["segment_ids"] == [1, 2]
    third = h.tracker.begin_segment(3, 3000)
    assert third is not first and third.segment_ids == [3]


async def test_turn_of_empty_finals_is_not_committed() -> None:
    h = harness(policy=SilenceTimeoutPolicy(WAIT_MS))
    speak(h, 1, "", None)
    await asyncio.sleep(WAIT_MS * 2 / 1000)
    assert h.commits == [] and h.tracker.state is TurnState.IDLE


def test_join_texts() -> None:
    assert join_texts(["打开", "车门"]) == "打开车门"
    assert join_texts(["open the", "door"]) == "open the door"
    assert join_texts(["", "门", "", "AB"]) == "门AB"
    assert join_texts(["Open the door please.", "Open", ", now"]) == "Open the door please. Open, now"
    assert join_texts(["打开车门。", "Open it"]) == "打开车门。Open it"


def test_sample_ring_keeps_exactly_the_newest_samples() -> None:
    ring = SampleRing(10)
    reference: list[int] = []
    rng = np.random.default_rng(0)
    for _ in range(500):
        count = int(rng.integers(0, 25))
        chunk = np.arange(len(reference), len(reference) + count).astype(np.int16)
        reference += chunk.tolist()
        ring.append(chunk)
        since = int(rng.integers(0, len(reference) + 2))
        expected = np.array(reference[max(since, len(reference) - 10):], dtype=np.int16)
        assert np.array_equal(ring.since(since), expected)
    assert ring.nbytes == 20
    ring.release()
    assert ring.nbytes == 0


async def test_wait_ms_bounds_a_late_model() -> None:
    h = harness()
    speak(h, 1, "A", 0.99, model_delay_s=1.0)  # confident, but far too late
    got = decision(await h.next_commit())
    assert got["reason"] == "timeout" and got["probability"] is None
    assert WAIT_MS <= got["wait_ms"] < WAIT_MS + 100


# ----- text-aware holding, eager and resumed events ------------------------------------------------

HOLD = HoldRule(enabled=True, threshold=1.01, wait_ms=WAIT_MS * 3)


@pytest.mark.parametrize(
    ("text", "ending"),
    [
        ("turn on the", TextEnding.UNFINISHED),
        ("Navigate to the gas station and.", TextEnding.UNFINISHED),  # engine punctuation is ignored
        ("set the temperature to", TextEnding.UNFINISHED),
        ("call my", TextEnding.UNFINISHED),
        ("um", TextEnding.UNFINISHED),
        ("把", TextEnding.UNFINISHED),
        ("把空调", TextEnding.UNFINISHED),  # 把 and its object, no verb yet
        ("把它关了", TextEnding.OPEN),
        ("调整方向", TextEnding.OPEN),  # 向 ends words: no single-character rule for it
        ("把空调调暖和", TextEnding.OPEN),
        ("帮我提交申请", TextEnding.OPEN),
        ("打开车窗还有", TextEnding.UNFINISHED),
        ("我想", TextEnding.UNFINISHED),
        ("嗯，", TextEnding.UNFINISHED),
        ("open the car door please", TextEnding.OPEN),
        ("turn it off", TextEnding.OPEN),
        ("thank you", TextEnding.OPEN),
        ("打开车门", TextEnding.OPEN),
        ("好的", TextEnding.OPEN),  # "的" ends complete replies, so it does not hold
        ("", TextEnding.OPEN),
    ],
)
def test_text_endings(text: str, ending: TextEnding) -> None:
    assert text_ending(text) is ending


async def test_unfinished_words_hold_a_confident_turn() -> None:
    h = harness(policy=TurnSensePolicy(THRESHOLD, WAIT_MS, HOLD))
    speak(h, 1, "turn on the", 0.99)
    await asyncio.sleep(WAIT_MS * 1.5 / 1000)
    assert h.commits == []  # the model alone would have committed at once
    got = decision(await h.next_commit(timeout=3.0))
    assert got["reason"] == "timeout" and got["text_ending"] == "unfinished" and got["threshold"] == 1.01
    assert got["wait_ms"] >= HOLD.wait_ms


async def test_open_words_leave_the_decision_to_the_model() -> None:
    h = harness(policy=TurnSensePolicy(THRESHOLD, WAIT_MS, HOLD))
    speak(h, 1, "turn on the radio", 0.99)
    got = decision(await h.next_commit())
    assert got["reason"] == "model" and got["text_ending"] == "open" and got["wait_ms"] < WAIT_MS


async def test_hold_applies_without_a_model_too() -> None:
    h = harness(policy=SilenceTimeoutPolicy(WAIT_MS, HOLD))
    speak(h, 1, "把", None)
    got = decision(await h.next_commit(timeout=3.0))
    assert got["reason"] == "timeout" and got["wait_ms"] >= HOLD.wait_ms and got["text_ending"] == "unfinished"


def eager_policy() -> TurnSensePolicy:
    return TurnSensePolicy(THRESHOLD, WAIT_MS, HOLD, eager_threshold=0.4)


async def test_eager_then_commit_on_timeout() -> None:
    h = harness(policy=eager_policy(), eager=True)
    speak(h, 1, "打开车门", 0.5)
    eager = await h.next_commit()
    assert eager == {"type": "turn_eager", "seat": "s", "turn_id": 1, "text": "打开车门", "probability": 0.5}
    commit = await h.next_commit()
    assert commit["type"] == "commit" and commit["turn_id"] == 1 and decision(commit)["reason"] == "timeout"


async def test_eager_then_resumed_then_one_commit_with_the_same_turn_id() -> None:
    h = harness(policy=eager_policy(), eager=True)
    speak(h, 1, "打开", 0.5)
    assert (await h.next_commit())["type"] == "turn_eager"
    turn = h.tracker.begin_segment(2, 900)  # the user goes on
    assert h.commits == [{"type": "turn_resumed", "seat": "s", "turn_id": 1}]
    h.commits.clear()
    turn.prediction = prediction(0.95)
    h.tracker.segment_final(turn, 2, "车门", 1400, time.perf_counter())
    commit = await h.next_commit()
    assert commit["type"] == "commit" and commit["turn_id"] == 1 and commit["text"] == "打开车门"
    h.tracker.begin_segment(3, 3000)  # a new turn: nothing to resume
    await asyncio.sleep(0.02)
    assert h.commits == []


@pytest.mark.parametrize(("probability", "text", "session_wants_it", "frames"), [
    (0.95, "打开车门", True, ["commit"]),  # confident: the commit comes at once, no eager before it
    (0.3, "打开车门", True, ["commit"]),  # below the eager threshold
    (0.5, "turn on the", True, []),  # held by its words (3 x WAIT_MS): not "probably over", no commit yet
    (0.5, "打开车门", False, ["commit"]),  # the session did not ask
    (0.5, "", True, []),  # nothing to answer, nothing to commit
])
async def test_no_eager(probability: float, text: str, session_wants_it: bool, frames: list[str]) -> None:
    h = harness(policy=eager_policy(), eager=session_wants_it)
    speak(h, 1, text, probability)
    await asyncio.sleep(WAIT_MS * 2 / 1000)
    assert [frame["type"] for frame in h.commits] == frames


def staged_harness(wake: dict | None = None, text: dict | None = None, policy=None) -> tuple[Harness, TextStage]:
    from kitt_stt.text import TextSettings, WakeSettings

    stage = TextStage(TextSettings(**(text or {})), WakeSettings(**(wake or {})))
    return harness(policy=policy or eager_policy(), eager=True), stage


def staged_speak(h: Harness, stage: TextStage, segment_id: int, text: str, p: float | None,
                 start_ms: int = 0, end_ms: int = 500, lang: str | None = None) -> None:
    turn = h.tracker.begin_segment(segment_id, start_ms, stage)
    turn.prediction = None if p is None else prediction(p)
    staged = stage.final(text, lang, detect_wake=turn.at_start(segment_id))
    h.tracker.segment_final(turn, segment_id, text, end_ms, time.perf_counter(), lang, staged)


async def test_no_eager_for_a_turn_that_will_be_filtered() -> None:
    h, stage = staged_harness(wake={"phrases": ("ABC",), "mode": "required"})
    staged_speak(h, stage, 1, "我们先去吃饭吧", 0.5)
    assert [f["type"] for f in [await h.next_commit()]] == ["filtered"]
    assert h.commits == []


async def test_eager_text_is_the_commit_text_with_itn() -> None:
    h, stage = staged_harness()
    staged_speak(h, stage, 1, "set the temperature to twenty six degrees", 0.5, lang="en")
    eager, commit = await h.next_commit(), await h.next_commit()
    assert eager["type"] == "turn_eager" and commit["type"] == "commit"
    assert eager["text"] == commit["text"] == "set the temperature to 26 degrees"


async def test_noise_turns_neither_close_nor_reopen_the_follow_up_window() -> None:
    h, stage = staged_harness(wake={"phrases": ("ABC",), "mode": "required", "follow_up_ms": 8000},
                              policy=SilenceTimeoutPolicy(30))  # decisions at once, by silence
    staged_speak(h, stage, 1, "ABC", None, 0, 1000)  # the wake phrase alone: a window to 9000
    await asyncio.sleep(0.1)
    for index, start in enumerate((7000, 14_000, 21_000, 28_000, 35_000)):  # noise every 7 s, inside each window
        staged_speak(h, stage, 2 + index, "", None, start, start + 500)
        await asyncio.sleep(0.1)
    staged_speak(h, stage, 9, "我们先去吃饭吧", None, 40_000, 41_000)  # within 8 s of the last noise
    assert [(await h.next_commit())["type"] for _ in range(2)] == ["wake", "filtered"]  # wake: the first turn


def test_a_wake_phrase_counts_only_while_earlier_finals_said_nothing_else() -> None:
    from kitt_stt.pipeline.turn import Turn
    from kitt_stt.text import StagedText

    turn = Turn(start_ms=0, segment_ids=[1, 2])
    assert not turn.at_start(2)  # segment 1's final is still pending: it may hold words
    turn.staged_finals[1] = StagedText("")  # the wake phrase alone
    assert turn.at_start(2)
    turn.staged_finals[1] = StagedText("打开车窗")
    assert not turn.at_start(2) and turn.at_start(1)


async def test_a_failing_text_stage_costs_no_commit() -> None:
    class Broken(TextStage):
        def final(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("grammar crashed")

    h = harness(policy=SilenceTimeoutPolicy(300))
    turn = h.tracker.begin_segment(1, 0, Broken())
    h.tracker.segment_final(turn, 1, "打开", 500, time.perf_counter())
    h.tracker.begin_segment(2, 700)  # two segments: the commit stages the joined text again
    h.tracker.segment_final(turn, 2, "车门", 1200, time.perf_counter())
    assert (await h.next_commit())["text"] == "打开车门"


async def test_turn_ids_stay_consecutive_across_noise_turns() -> None:
    h = harness(policy=SilenceTimeoutPolicy(WAIT_MS))
    speak(h, 1, "AB", None)
    assert (await h.next_commit())["turn_id"] == 1
    speak(h, 2, "", None)  # noise: never committed, takes no id
    await asyncio.sleep(WAIT_MS * 1.5 / 1000)
    speak(h, 3, "CD", None)
    assert (await h.next_commit())["turn_id"] == 2


async def test_a_decision_overtaken_by_speech_does_not_commit() -> None:
    """Regression: the prediction made at the pause is often done before the final, and a cancel
    that reaches the decision while it awaits a done future was lost (``wait_for`` before 3.12
    swallows it): the turn was committed mid-speech and the next segment's text never was."""
    h = harness(policy=TurnSensePolicy(0.9, 300, eager_threshold=0.5), eager=True)
    turn = h.tracker.begin_segment(1, 0)
    turn.prediction = prediction(0.95)
    await asyncio.sleep(0.01)  # the prediction is done before the final, as at a pause
    h.tracker.segment_final(turn, 1, "打开", 500, time.perf_counter())
    await asyncio.sleep(0)  # the decision starts and awaits the done prediction
    resumed = h.tracker.begin_segment(2, 900)  # speech resumes in the same loop iteration
    await asyncio.sleep(0.05)
    assert h.commits == [] and resumed is turn
    resumed.prediction = prediction(0.95)
    h.tracker.segment_final(resumed, 2, "车门", 1400, time.perf_counter())
    commit = await h.next_commit()
    assert commit["text"] == "打开车门" and commit["segment_ids"] == [1, 2]


async def test_a_failing_policy_still_waits_for_the_timeout_before_it_commits() -> None:
    """Review finding: a policy that raised committed the turn at once, so a fault in the end-of-turn
    decision cut the speaker off; it now commits where a late model would, at the timeout."""

    class Broken(SilenceTimeoutPolicy):
        async def decide(self, context):  # type: ignore[no-untyped-def]
            raise RuntimeError("broken policy")

    commits: list = []
    tracker = TurnTracker("s", Broken(WAIT_MS), lambda frame: commits.append(frame.model_dump()),
                          finals_done=lambda: None, max_duration_ms=60_000, fallback_wait_ms=WAIT_MS)
    h = Harness(tracker, commits)
    speak(h, 1, "打开车门", None)
    await asyncio.sleep(WAIT_MS / 1000 / 2)
    assert h.commits == []  # not at once
    await asyncio.sleep(WAIT_MS / 1000)
    assert [c["metadata"]["eot"]["decision"]["reason"] for c in h.commits] == ["timeout"]
