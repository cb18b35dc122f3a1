"""The fused decision around the text view (issue 35's review): which evidence may be named as
deciding, the wait as a hard bound when the text view is slow, a commit that does not wait for a
model the weights do not weigh, the thread the text view runs on, and when a process loads it.
A fake text view (fixed log-odds, optional delay) keeps each path under control; the shipped
weights and threshold decide."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.eot import CommitReason, HoldRule, TurnContext
from kitt_stt.turn import policy_factory
from kitt_stt.turn.combiner import Combiner, load_combiner
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.text_model import TextEnd, TurnTextModel
from kitt_stt.turnsense.model import TurnPrediction

HOLD = HoldRule(enabled=True, threshold=1.01, wait_ms=500)
# the shipped weights (text_end, han_text) turn these English log-odds into these confidences
SURE, UNSURE_BUT_LEANING_OVER = -3.0, -13.3  # ~0.96 (>= 0.7: commit), ~0.6 (eager, not commit)


class FakeTextView:
    """``end_of_turn`` with a fixed answer after ``delay_s``, recording the threads it ran on."""

    def __init__(self, log_odds: float, delay_s: float = 0.0) -> None:
        self.log_odds, self.delay_s = log_odds, delay_s
        self.threads: list[str] = []
        self.finished = threading.Event()

    def end_of_turn(self, text: str) -> TextEnd:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay_s)
        self.finished.set()
        return TextEnd(self.log_odds, len(text.split()), self.delay_s * 1000.0)


def fused(view: FakeTextView, wait_ms: int = 300, eager: float | None = None,
          combiner: Combiner | None = None) -> FusedPolicy:
    settings = FusedSettings(0.7, wait_ms, (300, 600), 200, eager)
    return FusedPolicy(settings, combiner or load_combiner(), HOLD, cast(TurnTextModel, view))


def answered(probability: float) -> asyncio.Future[TurnPrediction]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(TurnPrediction(probability, 1.0, 2.0))
    return future


def pending() -> asyncio.Future[TurnPrediction]:
    return asyncio.get_running_loop().create_future()


async def test_only_a_weighed_kind_of_evidence_is_named_as_deciding() -> None:
    """A turn that timed out although its words leaned towards "over": the words are the only
    weighed kind, so they decided; the unweighed model (contribution 0) had been named before."""
    decision = await fused(FakeTextView(UNSURE_BUT_LEANING_OVER), wait_ms=100).decide(
        TurnContext(time.perf_counter(), answered(0.5), "turn on the air conditioning"))
    assert decision.reason is CommitReason.TIMEOUT and decision.evidence is not None
    assert decision.evidence["words"] > 0 and decision.decided_by == "words"
    assert set(decision.evidence) == {"model", "silence", "words", "prosody"}  # every kind still named


async def test_a_slow_text_view_cannot_hold_the_turn_past_its_wait() -> None:
    view = FakeTextView(SURE, delay_s=0.8)
    started = time.perf_counter()
    decision = await fused(view, wait_ms=250).decide(TurnContext(started, answered(0.9), "open the window"))
    assert decision.reason is CommitReason.TIMEOUT  # late counts as no opinion, not as "sure"
    assert 250 <= decision.wait_ms < 450 and (time.perf_counter() - started) < 0.45
    assert decision.evidence is not None and decision.evidence["words"] == 0.0
    # the late run still holds the one evidence thread until it ends: let it, for the next decision
    assert await asyncio.to_thread(view.finished.wait, 2.0)


async def test_runs_still_queued_when_their_wait_ends_are_dropped_not_run_late() -> None:
    """Six decisions at once behind one slow view: the thread runs what it had started, and the
    runs still queued when their decisions gave up never run, so a later decision is not delayed."""
    view = FakeTextView(SURE, delay_s=0.2)
    started = time.perf_counter()
    await asyncio.gather(*(fused(view, wait_ms=250).decide(TurnContext(started, answered(0.5), f"open window {i}"))
                           for i in range(6)))
    await asyncio.sleep(0.3)  # what had started ends
    assert len(view.threads) <= 3  # two fit in the 250 ms (plus one started at its edge); not all six
    fast = FakeTextView(SURE)
    decision = await fused(fast).decide(TurnContext(time.perf_counter(), answered(0.5), "open the window"))
    assert decision.reason is CommitReason.MODEL and fast.threads and decision.wait_ms < 250


async def test_a_commit_does_not_wait_for_a_model_the_weights_do_not_weigh() -> None:
    """The shipped weights weigh the words only: a sure text commits at once while TurnSense has
    not answered, and the commit says it had no p."""
    decision = await fused(FakeTextView(SURE), wait_ms=1500).decide(
        TurnContext(time.perf_counter(), pending(), "open the window"))
    assert decision.reason is CommitReason.MODEL and decision.wait_ms < 200
    assert decision.probability is None and decision.model_ms is None and decision.decided_by == "words"


async def test_its_answer_is_reported_when_it_had_come() -> None:
    decision = await fused(FakeTextView(SURE)).decide(TurnContext(time.perf_counter(), answered(0.2), "open it"))
    assert decision.reason is CommitReason.MODEL and decision.probability == 0.2 and decision.model_ms == 3.0


async def test_weights_that_weigh_the_model_wait_for_its_answer() -> None:
    """Weights with the model's p: a commit still needs the answer, which here comes 150 ms late."""
    with_p = Combiner(mean=(0.0, -18.7729), scale=(1.0, 6.4795), weights=(1.0, 1.7435), bias=0.0,
                      features=("model_logit", "text_end"))
    prediction = pending()
    asyncio.get_running_loop().call_later(0.15, prediction.set_result, TurnPrediction(0.9, 1.0, 2.0))
    decision = await fused(FakeTextView(SURE), wait_ms=1500, combiner=with_p).decide(
        TurnContext(time.perf_counter(), prediction, "open the window"))
    assert decision.reason is CommitReason.MODEL and decision.probability == 0.9 and decision.wait_ms >= 150


async def test_an_answer_that_came_after_the_words_is_the_first_looks() -> None:
    """Not confident on the words: the turn waits, takes the model's late answer as its p, and the
    commit names the first look as when the answer had come in time."""
    prediction = pending()
    asyncio.get_running_loop().call_later(0.05, prediction.set_result, TurnPrediction(0.4, 1.0, 2.0))
    decision = await fused(FakeTextView(UNSURE_BUT_LEANING_OVER), wait_ms=150).decide(
        TurnContext(time.perf_counter(), prediction, "turn on the air conditioning"))
    assert decision.reason is CommitReason.TIMEOUT and decision.probability == 0.4 and decision.looks_ms == (100,)


async def test_probably_over_still_waits_for_the_models_answer() -> None:
    """Not sure enough to commit, sure enough to announce: the announcement needs the model's answer
    (docs/protocol.md), so it comes when that answer does, and never without it."""
    told: list[float] = []
    prediction = pending()
    asyncio.get_running_loop().call_later(0.1, prediction.set_result, TurnPrediction(0.5, 1.0, 2.0))
    decision = await fused(FakeTextView(UNSURE_BUT_LEANING_OVER), eager=0.5).decide(
        TurnContext(time.perf_counter(), prediction, "turn on the air conditioning", on_eager=told.append))
    assert decision.reason is CommitReason.TIMEOUT and len(told) == 1 and 0.5 <= told[0] < 0.7
    silent: list[float] = []
    await fused(FakeTextView(UNSURE_BUT_LEANING_OVER), wait_ms=150, eager=0.5).decide(
        TurnContext(time.perf_counter(), pending(), "turn on the air conditioning", on_eager=silent.append))
    assert silent == []


async def test_the_text_view_runs_on_the_evidence_thread_never_the_loop() -> None:
    view = FakeTextView(SURE)
    await fused(view).decide(TurnContext(time.perf_counter(), answered(0.5), "open the window"))
    assert len(view.threads) == 1 and view.threads[0].startswith("turn-evidence")
    assert view.threads[0] != threading.current_thread().name


@pytest.mark.parametrize("turn", [{"policy": "turnsense"}, {"text_model": None}, {"fused_weights": "P_ONLY"}])
def test_a_decision_that_would_not_read_the_words_loads_no_text_model(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path, turn: dict[str, Any]) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("resolved a text model the decision does not use")

    monkeypatch.setattr("kitt_stt.models.registry.resolve_model", refuse)
    if turn.get("fused_weights") == "P_ONLY":  # weights that do not weigh text_end
        weights = tmp_path / "weights.json"
        weights.write_text(json.dumps({"features": ["model_logit"], "mean": [0.0], "scale": [1.0], "weights": [1.0],
                                       "bias": 0.0}))
        turn = {"fused_weights": str(weights)}
    config = AppConfig.model_validate({"turn": turn})
    assert policy_factory.load_text_model(config, has_model=True) is None
    assert policy_factory.load_text_model(AppConfig(), has_model=False) is None  # silence only: no words read
    assert policy_factory.text_model_spec(config) is None


def test_the_text_model_is_read_once_and_shared_by_every_seats_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start-up reads it; a seat's policy is built around that one (no registry lookup per seat)."""
    view = cast(TurnTextModel, FakeTextView(SURE))
    monkeypatch.setattr("kitt_stt.models.registry.resolve_model",
                        lambda *_args, **_kwargs: (_ for _ in ()).throw(AssertionError("looked up per seat")))
    policies = [policy_factory.build_policy(AppConfig(), True, view) for _ in range(3)]
    assert all(isinstance(policy, FusedPolicy) and policy._text_model is view for policy in policies)
