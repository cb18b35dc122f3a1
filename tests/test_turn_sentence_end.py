"""The sentence-end language model feature (kitt_stt/turn/sentence_end.py): the CMU English
trigram LM shipped in the pocketsphinx wheel, scored on fixed phrases; neutral (and said so) where
the model is missing, for Mandarin and for words it does not know; read once, off the event loop."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kitt_stt.config.schema import AppConfig, TurnConfig, TurnPolicy
from kitt_stt.pipeline.eot import CommitReason, HoldRule, TurnContext
from kitt_stt.turn import sentence_end as lm
from kitt_stt.turn.combiner import Combiner
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.policy_factory import build_policy, load_at_start
from kitt_stt.turnsense.model import TurnPrediction
from tests.helpers import POCKETSPHINX_WHEEL

NO_WHEEL = not POCKETSPHINX_WHEEL
needs_lm = pytest.mark.skipif(NO_WHEEL, reason="pocketsphinx 5.0.4 has no wheel for this platform (docs/turns.md)")

COMPLETE = ["open the window", "go forward ten meters", "eight of spades", "close the window", "play some music"]
CUT = ["turn on the", "open the", "set the temperature to", "i would like to", "call my", "play some"]


@needs_lm
def test_the_model_is_installed_where_its_wheel_exists() -> None:
    """Not a skip where it can exist: a missing LM would silently make the feature neutral."""
    assert lm.load_model() is not None


@needs_lm
@pytest.mark.parametrize("cut", CUT)
def test_endings_that_cannot_end_a_sentence_score_below_every_complete_one(cut: str) -> None:
    assert lm.sentence_end(cut) < -0.5 < 0.2 < min(lm.sentence_end(text) for text in COMPLETE)


@needs_lm
def test_the_recognizers_spelling_does_not_change_the_score() -> None:
    """Whisper writes digits, capitals and punctuation; the LM knows lower-case words."""
    assert lm.sentence_end("Go forward 10 meters.") == lm.sentence_end("go forward ten meters")
    assert lm.english_words("It's 21 degrees") == ["it's", "twenty", "one", "degrees"]


@needs_lm
@pytest.mark.parametrize("text", ["", "打开车门", "把空调", "窓を開けて", "xqzvwk", "the xqzvwk"])
def test_what_the_english_model_cannot_judge_is_neutral(text: str) -> None:
    assert lm.sentence_end(text) == 0.0


def test_a_missing_model_is_neutral_and_said_once(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(lm, "_loaded", [])
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # import pocketsphinx -> ImportError
    with caplog.at_level(logging.WARNING, logger=lm.__name__):
        assert lm.sentence_end("open the window") == 0.0
        assert lm.sentence_end("turn on the") == 0.0
    warnings = [r for r in caplog.records if "pocketsphinx is not installed" in r.getMessage()]
    assert len(warnings) == 1 and "neutral" in warnings[0].getMessage()


def test_a_fused_server_says_at_start_up_that_the_model_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """What `kitt-stt serve` does with turn.policy fused where pocketsphinx is missing (the Orin
    image): the warning comes with the start-up, before any turn, and names the arch."""
    monkeypatch.setattr(lm, "_loaded", [])
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)
    config = AppConfig(turn=TurnConfig(policy=TurnPolicy.FUSED))
    with caplog.at_level(logging.WARNING, logger=lm.__name__):
        load_at_start(build_policy(config, has_model=True))
    [warning] = [r.getMessage() for r in caplog.records if "pocketsphinx is not installed" in r.getMessage()]
    assert "turn.policy fused" in warning and "aarch64" in warning
    assert lm._loaded == [None], "tried once, at start-up"


def _done(probability: float) -> asyncio.Future[TurnPrediction]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(TurnPrediction(probability, 1.0, 2.0))
    return future


@needs_lm
async def test_the_policy_weighs_the_lm_and_asks_it_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A combiner over the LM alone: an ending it likes commits at the pause, one it does not waits;
    the words (and the LM's first read) are evaluated on a worker thread, not the loop's."""
    asked_on: list[threading.Thread] = []
    score = lm.sentence_end

    def recording(text: str) -> float:
        asked_on.append(threading.current_thread())
        return score(text)

    monkeypatch.setattr("kitt_stt.turn.words.sentence_end", recording)
    lm_only = Combiner(mean=(0.0,), scale=(1.0,), weights=(4.0,), bias=0.0, features=("sentence_end",))
    policy = FusedPolicy(FusedSettings(0.8, 300, (), 200), lm_only, HoldRule(enabled=True, threshold=1.01, wait_ms=300))
    sure = await policy.decide(TurnContext(time.perf_counter(), _done(0.5), "Eight of spades."))
    assert sure.reason is CommitReason.MODEL and sure.decided_by == "words" and sure.wait_ms < 300
    # "he might even": no rule of turn_text holds it, the LM does (P(end) a tenth of the average)
    unsure = await policy.decide(TurnContext(time.perf_counter(), _done(0.5), "he might even"))
    assert unsure.reason is CommitReason.TIMEOUT and unsure.text_ending is not None
    assert unsure.text_ending.value == "open" and (unsure.confidence or 1.0) < 0.02
    assert asked_on and all(thread is not threading.main_thread() for thread in asked_on)


async def test_a_busy_default_thread_pool_does_not_stretch_the_wait() -> None:
    """The evidence runs on the policy's own thread: asyncio's default pool (uploads, file cuts,
    warm-up) busy for 2 s must not hold a decision whose wait is 300 ms (it did: 1.95 s)."""
    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(busy)
    blocker = loop.run_in_executor(None, time.sleep, 2.0)
    never: asyncio.Future[TurnPrediction] = loop.create_future()  # the model does not answer
    policy = FusedPolicy(FusedSettings(0.8, 300, (), 200), Combiner(mean=(0.0,), scale=(1.0,), weights=(1.0,),
                                                                  bias=0.0, features=("sentence_end",)),
                         HoldRule(enabled=False, threshold=1.01, wait_ms=300))
    started = time.perf_counter()
    decision = await policy.decide(TurnContext(started, never, "open the window"))
    took_ms = (time.perf_counter() - started) * 1000.0
    assert decision.reason is CommitReason.TIMEOUT and took_ms < 1500, took_ms
    await blocker


async def test_weights_without_the_lm_never_ask_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-fit that leaves ``sentence_end`` out (turn.fused_weights) does not read the model."""
    asked: list[str] = []
    monkeypatch.setattr("kitt_stt.turn.words.sentence_end", lambda text: asked.append(text) or 0.0)
    model_only = Combiner(mean=(0.0,), scale=(1.0,), weights=(1.0,), bias=0.0, features=("model_logit",))
    hold = HoldRule(enabled=True, threshold=1.01, wait_ms=300)
    policy = FusedPolicy(FusedSettings(0.8, 300, (), 200), model_only, hold)
    decision = await policy.decide(TurnContext(time.perf_counter(), _done(0.95), "open the window"))
    assert decision.reason is CommitReason.MODEL and asked == []
