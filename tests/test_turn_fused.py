"""The fused end-of-turn decision (issue 23): prosody, the words both ways, the combiner and its
shipped weights, and the graded-waiting policy with its second looks, driven by injected
predictions and a hand-set combiner (confidence = the model's p) so each path is under control."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.config.loader import load_config
from kitt_stt.config.schema import TurnConfig, TurnPolicy
from kitt_stt.pipeline.eot import CommitReason, HoldRule, SilenceTimeoutPolicy, TurnContext, TurnSensePolicy
from kitt_stt.turn.combiner import WEIGHTS_FILE, Combiner, CombinerError, load_combiner
from kitt_stt.turn.features import FEATURES, feature_vector
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.policy_factory import build_policy
from kitt_stt.turn.prosody import NEUTRAL, prosody
from kitt_stt.turn.words import word_evidence
from kitt_stt.turnsense.model import TurnPrediction
from utils.turns.extract import TABLE
from utils.turns.recognizer_view import TokenKind, View, continuation_bytes, threshold_for, token_kinds
from utils.turns.scores import auc
from utils.turns.text_dev import TABLE as DEV_TABLE
from utils.turns.train import weights_text

REPO = Path(__file__).resolve().parents[1]
# confidence = sigmoid(model logit) = p; the silence weighs nothing
P_ONLY = Combiner(mean=(0.0, 0.0), scale=(1.0, 1.0), weights=(1.0, 0.0), bias=0.0,
                  features=("model_logit", "silence_s"))
HOLD = HoldRule(enabled=True, threshold=1.01, wait_ms=500)


def sweep(start_hz: float, end_hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000.0
    f0 = start_hz + (end_hz - start_hz) * t / seconds
    return (8000 * np.sin(2 * np.pi * np.cumsum(f0) / 16000)).astype(np.int16)


def test_prosody_tells_a_falling_pitch_from_a_rising_one_and_ignores_the_pause() -> None:
    pause = np.zeros(4800, dtype=np.int16)
    falling = prosody(np.concatenate([sweep(200, 120), pause]))
    rising = prosody(np.concatenate([sweep(120, 200), pause]))
    assert falling.pitch_slope < -5 and falling.pitch_final < -2
    assert rising.pitch_slope > 5 and rising.pitch_final > 2
    assert prosody(np.zeros(16000, dtype=np.int16)) == NEUTRAL


@pytest.mark.parametrize(("text", "unfinished", "complete"), [
    ("turn on the", True, False), ("把空调", True, False), ("open the window", False, True),
    ("set the temperature to twenty degrees", False, True), ("温度调到20度", False, True),
    ("what is the weather like", False, True), ("今天天气怎么样", False, True), ("打开车门", False, True),
    ("Front", False, False), ("8 of spades", False, False),
])
def test_words_give_evidence_both_ways(text: str, unfinished: bool, complete: bool) -> None:
    evidence = word_evidence(text)
    assert (evidence.unfinished, evidence.complete_form) == (unfinished, complete)


def test_the_training_script_regenerates_the_shipped_weights_bit_for_bit() -> None:
    """From the text view's development set (the phrase table's cached scores), never from the clips."""
    assert weights_text(json.loads(DEV_TABLE.read_text())) == WEIGHTS_FILE.read_text()
    assert load_combiner().weights == tuple(json.loads(WEIGHTS_FILE.read_text())["weights"])


def test_training_needs_no_text_model_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table caches each phrase's text-view score, so a machine without the text model regenerates
    the same weights: the fit never asks the model."""
    import kitt_stt.turn.text_model as text_model

    def refuse(*_args: object) -> None:
        raise AssertionError("training asked the text model")

    monkeypatch.setattr(text_model.TurnTextModel, "__init__", refuse)
    monkeypatch.setattr(text_model.TurnTextModel, "end_of_turn", refuse)
    assert weights_text(json.loads(DEV_TABLE.read_text())) == WEIGHTS_FILE.read_text()


def test_weights_for_features_this_code_does_not_build_or_of_the_wrong_shape_are_refused() -> None:
    data = json.loads(WEIGHTS_FILE.read_text())
    with pytest.raises(CombinerError, match="does not build"):
        Combiner.from_dict({**data, "features": [*data["features"][:-1], "word_count"]})
    with pytest.raises(CombinerError, match="one entry per feature"):
        Combiner.from_dict({**data, "features": data["features"][:-1]})


@pytest.mark.parametrize(("change", "message"), [
    ({"weights": [float("nan")]}, "finite"),  # a NaN weight would commit every turn at once
    ({"bias": float("inf")}, "finite"),
    ({"mean": [float("-inf")]}, "finite"),
    ({"scale": [0.0]}, "scale must be > 0"),  # every decision would divide by zero
    ({"scale": [-1.0]}, "scale must be > 0"),
])
def test_weights_that_cannot_score_are_refused(change: dict, message: str) -> None:
    data = json.loads(WEIGHTS_FILE.read_text())
    broken = {key: ([*value, *data[key][1:]] if isinstance(value, list) else value) for key, value in change.items()}
    with pytest.raises(CombinerError, match=message):
        Combiner.from_dict({**data, **broken})


def test_weights_naming_a_feature_twice_are_refused() -> None:
    data = json.loads(WEIGHTS_FILE.read_text())
    with pytest.raises(CombinerError, match="twice"):
        Combiner.from_dict({**data, "features": [data["features"][0], *data["features"][:-1]]})


def test_the_shipped_combiner_weighs_the_text_view() -> None:
    """Issue 35: the text view's "the message ends here" is a shipped feature with a positive weight
    (an ending the model finds likelier makes "over" likelier), and Chinese text gets its offset."""
    combiner = load_combiner()
    assert combiner.features == FEATURES and {"text_end", "han_text"} <= set(FEATURES)
    assert combiner.weights[FEATURES.index("text_end")] > 0 and combiner.weights[FEATURES.index("han_text")] > 0


def test_without_the_text_view_its_chinese_offset_pushes_nothing() -> None:
    """The offset belongs to the text view: with no view (no words, no model) a Chinese turn must not
    look likelier to be over than an English one."""
    combiner = load_combiner()
    chinese, english = (combiner.score(feature_vector(0.5, 100, word_evidence(text), NEUTRAL, combiner.features))
                        for text in ("打开车门", "open the door"))
    assert chinese.confidence == english.confidence and chinese.contributions["words"] == 0.0


class FakeLook:
    """A second look whose model answers ``answers`` in turn."""

    def __init__(self, *answers: float) -> None:
        self.answers = list(answers)
        self.asked_at: list[float] = []

    def audio(self) -> np.ndarray:
        return np.concatenate([sweep(200, 120), np.zeros(3200, dtype=np.int16)])

    def predict(self) -> asyncio.Future[TurnPrediction]:
        self.asked_at.append(time.perf_counter())
        future = asyncio.get_running_loop().create_future()
        future.set_result(TurnPrediction(self.answers.pop(0), 1.0, 2.0))
        return future


def done(probability: float) -> asyncio.Future[TurnPrediction]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(TurnPrediction(probability, 1.0, 2.0))
    return future


def policy(threshold: float = 0.8, wait_ms: int = 700, eager: float | None = None) -> FusedPolicy:
    # the decision starts at 200 ms of silence, so the looks at 300 and 600 ms come 100 and 400 ms in
    return FusedPolicy(FusedSettings(threshold, wait_ms, (300, 600), 200, eager), P_ONLY, HOLD)


async def test_confident_at_the_pause_commits_at_once_without_a_second_look() -> None:
    look = FakeLook()
    context = TurnContext(time.perf_counter(), done(0.9), "打开车门", look=look)
    decision = await policy().decide(context)
    assert decision.reason is CommitReason.MODEL and decision.wait_ms < 300  # no sleep: only the prosody ran
    assert (decision.look_ms, decision.looks_ms, look.asked_at) == (100, (100,), [])
    assert decision.confidence == pytest.approx(0.9, abs=1e-3)


async def test_an_unsure_pause_looks_again_and_commits_when_the_new_answer_is_sure() -> None:
    look = FakeLook(0.95)
    started = time.perf_counter()
    decision = await policy().decide(TurnContext(started, done(0.3), "打开车门", look=look))
    assert decision.reason is CommitReason.MODEL and decision.look_ms == 300 and decision.looks_ms == (100, 300)
    assert 90 <= (look.asked_at[0] - started) * 1000 < 300  # at 300 ms of silence, 100 ms into the decision
    assert decision.wait_ms < 700


async def test_unsure_at_every_look_waits_for_the_silence() -> None:
    look = FakeLook(0.4, 0.5)
    decision = await policy().decide(TurnContext(time.perf_counter(), done(0.3), "打开车门", look=look))
    assert decision.reason is CommitReason.TIMEOUT and decision.looks_ms == (100, 300, 600)
    assert decision.wait_ms >= 700 and decision.look_ms is None
    assert decision.decided_by in {"model", "silence", "words", "prosody"}


async def test_words_that_end_mid_phrase_wait_long_and_take_no_second_look() -> None:
    look = FakeLook(0.99, 0.99)
    decision = await policy().decide(TurnContext(time.perf_counter(), done(0.99), "turn on the", look=look))
    assert decision.reason is CommitReason.TIMEOUT and decision.wait_ms >= HOLD.wait_ms
    assert look.asked_at == [] and decision.text_ending is not None and decision.text_ending.value == "unfinished"


async def test_a_failed_model_is_unsure_and_the_wait_stays_the_bound() -> None:
    failed: asyncio.Future[TurnPrediction] = asyncio.get_running_loop().create_future()
    failed.set_exception(RuntimeError("model failed"))
    decision = await policy(wait_ms=300).decide(TurnContext(time.perf_counter(), failed, "打开车门"))
    assert decision.reason is CommitReason.TIMEOUT and decision.looks_ms == ()
    assert 300 <= decision.wait_ms < HOLD.wait_ms


async def test_probably_over_is_announced_once_before_the_wait() -> None:
    told: list[float] = []
    context = TurnContext(time.perf_counter(), done(0.6), "打开车门", on_eager=told.append, look=FakeLook(0.6, 0.6))
    decision = await policy(eager=0.5).decide(context)
    assert decision.reason is CommitReason.TIMEOUT and told == [pytest.approx(0.6, abs=1e-3)]


async def test_probably_over_needs_the_models_answer() -> None:
    """Review finding: a failed model with words that look whole announced turn_eager on the words
    alone; docs/protocol.md says turn_eager needs the end-of-turn model."""
    told: list[float] = []
    failed: asyncio.Future[TurnPrediction] = asyncio.get_running_loop().create_future()
    failed.set_exception(RuntimeError("model failed"))
    words_only = FusedPolicy(FusedSettings(0.99, 300, (), 200, 0.1), load_combiner(), HOLD)
    await words_only.decide(TurnContext(time.perf_counter(), failed, "打开车门", on_eager=told.append))
    assert told == []


async def test_a_second_look_is_cancelled_with_the_decision() -> None:
    """Review finding: a look the decision started ran on after speech resumed (the seat cancels
    the decision), holding the model's one thread and the seat's one-run-at-a-time slot."""
    started: list[asyncio.Future[TurnPrediction]] = []

    class SlowLook(FakeLook):
        def predict(self) -> asyncio.Future[TurnPrediction]:
            future: asyncio.Future[TurnPrediction] = asyncio.get_running_loop().create_future()
            started.append(future)
            return future  # never answers by itself

    deciding = asyncio.create_task(policy(wait_ms=1500).decide(
        TurnContext(time.perf_counter(), done(0.3), "打开车门", look=SlowLook())))
    while not started:
        await asyncio.sleep(0.01)
    deciding.cancel()  # speech resumed
    with pytest.raises(asyncio.CancelledError):
        await deciding
    assert started[0].cancelled()


@pytest.mark.parametrize(("chunk_pause_ms", "first_look_ms"), [(100, 100), (160, 160), (0, 200)])
async def test_the_first_look_is_the_pause_the_seats_first_prediction_heard(chunk_pause_ms: int,
                                                                            first_look_ms: int) -> None:
    """The first prediction runs when a pause of ``asr.chunk_pause_ms`` closes the last chunk, or at
    the segment's end (``vad.silence_ms``, 200) when chunking is off; the commit says so."""
    config = load_config(None, env={"KITT_STT__TURN__POLICY": "fused",
                                    "KITT_STT__ASR__CHUNK_PAUSE_MS": str(chunk_pause_ms)}).config
    config.turn.text_model = None  # the looks' timing is under test, not the words
    built = build_policy(config, has_model=True)
    assert isinstance(built, FusedPolicy) and built.settings.first_look_ms == first_look_ms
    sure = FusedPolicy(replace(built.settings, threshold=0.8), P_ONLY, HOLD)
    decision = await sure.decide(TurnContext(time.perf_counter(), done(0.95), "打开车门"))
    assert decision.reason is CommitReason.MODEL and decision.look_ms == first_look_ms


async def test_the_new_decision_fields_are_additive() -> None:
    fused = (await policy().decide(TurnContext(time.perf_counter(), done(0.9), "打开车门"))).as_metadata()
    plain = (await TurnSensePolicy(0.5, 100).decide(TurnContext(time.perf_counter(), done(0.9)))).as_metadata()
    old_keys = {"reason", "probability", "threshold", "wait_ms", "model_ms", "text_ending"}
    assert set(plain["eot"]["decision"]) == old_keys  # type: ignore[index]
    decision = fused["eot"]["decision"]  # type: ignore[index]
    assert set(decision) == old_keys | {"policy", "confidence", "look_ms", "looks_ms", "evidence", "decided_by"}
    assert decision["policy"] == "fused" and set(decision["evidence"]) == {"model", "silence", "words", "prosody"}
    assert decision["evidence"]["prosody"] == 0.0  # a kind the weights do not weigh is still named, at 0


@pytest.mark.parametrize("name", ["config.yaml", "config-k8s.yaml", "config-k3s-orin.yaml"])
def test_the_fused_decision_with_the_text_view_is_the_default(name: str) -> None:
    """Issue 35: the text view made the fused decision commit held-out complete turns early
    (docs/turns.md), so every shipped config runs it, with the schema's threshold (chosen held out)."""
    turn = load_config(REPO / name, env={}).config.turn
    assert turn.policy is TurnPolicy.FUSED and TurnConfig().policy is TurnPolicy.FUSED
    assert turn.text_model == "smollm2-turn" == TurnConfig().text_model
    assert turn.fused_looks_ms == [300, 600] and turn.fused_threshold == TurnConfig().fused_threshold == 0.7


@pytest.mark.parametrize("looks", [[600, 300], [50], [300, 300]])
def test_second_looks_must_be_ascending_and_in_range(looks: list[int]) -> None:
    with pytest.raises(ValueError, match="fused_looks_ms"):
        TurnConfig(fused_looks_ms=looks)



@pytest.mark.parametrize("content", ['{"features": ["model_logit"]}', "not json", None])
def test_unusable_weights_are_refused_with_the_reason(tmp_path: Path, content: str | None) -> None:
    """``serve`` builds the policy once at start-up and exits with this message (kitt_stt/cli.py)."""
    weights = tmp_path / "weights.json"
    if content is not None:
        weights.write_text(content)
    config = load_config(None, env={}).config.model_copy(
        update={"turn": TurnConfig(policy=TurnPolicy.FUSED, fused_weights=weights)})
    with pytest.raises(CombinerError, match="not usable end-of-turn weights"):
        build_policy(config, has_model=True)
    assert isinstance(build_policy(config, has_model=False), SilenceTimeoutPolicy)  # no model: no weights needed


# --- the recognizer's own view (utils/turns/recognizer_view.py): measured, not adopted ---

def test_the_view_tells_punctuation_that_ends_from_punctuation_that_goes_on(tmp_path: Path) -> None:
    spelled = [b".", b"?", b" !", "\u3002".encode(), b",", b"...", " \u2026".encode(), b" Go", b"\xef", b"\xbc"]
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(f"{base64.b64encode(raw).decode()} {index}\n" for index, raw in enumerate(spelled)))
    kinds = token_kinds(tokens)
    assert [kinds[i] for i in range(len(spelled))] == [
        TokenKind.FINAL, TokenKind.FINAL, TokenKind.FINAL, TokenKind.FINAL, TokenKind.GOING_ON,
        TokenKind.GOING_ON, TokenKind.GOING_ON, TokenKind.WORD, TokenKind.FULLWIDTH_PREFIX, TokenKind.WORD]
    assert list(continuation_bytes(tokens, len(spelled))) == [False] * 9 + [True]


def test_the_view_reads_ending_against_going_on_and_is_neutral_without_words() -> None:
    ends = View(p_final=0.6, p_eot=0.3, p_word=0.05, p_going_on=0.05, p_fullwidth=0.0, p_eot_last=0.9, tokens=5)
    goes_on = View(p_final=0.01, p_eot=0.04, p_word=0.9, p_going_on=0.05, p_fullwidth=0.0, p_eot_last=0.5, tokens=2)
    assert ends.ends_logit() == pytest.approx(np.log(0.9 / 0.1))
    assert goes_on.ends_logit() < 0 < ends.ends_logit()
    assert View(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0).ends_logit() == 0.0


def test_the_cut_off_threshold_commits_at_most_a_tenth_of_the_cut_turns() -> None:
    cut = [float(v) for v in range(20)]  # 20 cut turns: at most 2 may score above the threshold
    threshold = threshold_for(cut)
    assert sum(score > threshold for score in cut) == 2
    assert threshold_for([]) == -np.inf


def test_the_shipped_table_holds_the_view_and_reproduces_the_documented_finding() -> None:
    """docs/turns.md: the view alone separates human English turns better than TurnSense's p."""
    clips = [c for c in json.loads(TABLE.read_text())["clips"] if not c["synthetic"] and c["lang"] == "en"]
    labels = [c["complete"] for c in clips]
    view_auc = auc([View(**c["view"]).ends_logit() for c in clips], labels)
    assert round(view_auc, 2) == 0.80
    assert view_auc > auc([c["p"]["100"] for c in clips], labels) + 0.05
