"""Graded waiting on the fused end-of-turn confidence (``docs/turns.md``).

At the pause the combiner weighs what its weights name: with the shipped ones the text view's
"the message ends here" on the turn's words (``text_model``); weights may also weigh the audio
model's p, the silence, the words by rule and the prosody of the turn's end. Confident: commit
at once. Not yet: weights that weigh p or the silence look again after more silence
(``looks_ms``, e.g. 300 and 600 ms: the model runs again on the seat's ring, which now holds the
longer pause) and commit at the first confident look. Otherwise the turn waits ``wait_ms``, and
only words that end mid-phrase make it wait the long ``HoldRule.wait_ms``: those turns take no
second look. ``turn_eager`` keeps its meaning: "probably over" (the model answered and the
confidence reached ``eager_threshold``) while the policy still waits.

``wait_ms`` (or the hold's) is a hard upper bound: a late or failed model, or a text view that
has not answered in time, counts as no opinion. A commit waits for the model's answer only when
the weights weigh it: with weights that do not, its p is reported when it has come, and waiting
for it would only delay the commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kitt_stt.pipeline.eot import CommitReason, Decision, EotPolicy, HoldRule, TurnContext, answer_within, sleep_until
from kitt_stt.pipeline.turn_text import TextEnding
from kitt_stt.turn.combiner import Combiner, Score
from kitt_stt.turn.features import feature_vector
from kitt_stt.turn.prosody import NEUTRAL, Prosody, prosody
from kitt_stt.turn.text_model import TurnTextModel
from kitt_stt.turn.words import WordEvidence, word_evidence
from kitt_stt.turnsense.model import TurnPrediction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FusedSettings:
    threshold: float  # commit at a look when the fused confidence reaches this
    wait_ms: int  # the silence fallback
    looks_ms: tuple[int, ...]  # silence (ms) at the second looks
    silence_at_decision_ms: int  # silence already heard when the decision starts (vad.silence_ms)
    eager_threshold: float | None = None
    first_look_ms: int = 100  # the pause the seat's first prediction heard (asr.chunk_pause_ms, else vad.silence_ms)


class FusedPolicy(EotPolicy):
    def __init__(self, settings: FusedSettings, combiner: Combiner, hold: HoldRule,
                 text_model: TurnTextModel | None = None) -> None:
        self.settings = settings
        self.combiner = combiner
        self.hold = hold
        # the text view only where the weights weigh it (policy_factory loads it only then)
        self._text_model = text_model if "text_end" in combiner.features else None
        self._weighs_prosody = "prosody" in combiner.kinds  # the shipped weights do not: no pitch tracking then
        # a second look brings a new p and a longer silence: weights that weigh neither would score it the same
        self._looks_again = bool({"model", "silence"} & set(combiner.kinds))
        self._weighs_model = "model" in combiner.kinds

    async def decide(self, context: TurnContext) -> Decision:
        settings = self.settings
        ending = context.ending(self.hold)
        held = ending is TextEnding.UNFINISHED
        wait_ms = self.hold.wait_ms if held else settings.wait_ms
        threshold = self.hold.threshold if held else settings.threshold
        words, shape = await _evidence(context, self._text_model, self._weighs_prosody, wait_ms)
        if self._weighs_model:
            prediction = await answer_within(context.prediction, wait_ms - context.waited_ms())
        else:
            prediction = _answered(context.prediction)
        looks: list[int] = []
        score = self._score(prediction, settings.first_look_ms, words, shape, looks)
        if (prediction is not None or not self._weighs_model) and score.confidence >= threshold:
            # without the model's answer the words decided at the first look
            return _decision(CommitReason.MODEL, context, score, prediction, looks or [settings.first_look_ms],
                             ending, threshold)
        if prediction is None and not self._weighs_model:
            # not confident, so the turn waits anyway: the model's answer, when it comes, is the
            # commit's p and may announce a turn_eager; it is the first look's, whenever it came
            prediction = await answer_within(context.prediction, wait_ms - context.waited_ms())
            if prediction is not None:
                looks.append(settings.first_look_ms)
        # "probably over" needs the model's answer: words alone are not a turn_eager (docs/protocol.md)
        if (prediction is not None and context.on_eager is not None and not held
                and settings.eager_threshold is not None and score.confidence >= settings.eager_threshold):
            context.on_eager(score.confidence)
        # second looks: not for a held turn (its words wait), and none past the fallback
        look = context.look
        for look_ms in settings.looks_ms:
            if held or look is None or not self._looks_again:
                break
            target = look_ms - settings.silence_at_decision_ms
            if target >= wait_ms:
                break
            await sleep_until(context, target)
            again = await _owned_look(look.predict(), wait_ms - context.waited_ms())
            if again is None:
                continue
            prediction, score = again, self._score(again, look_ms, words, shape, looks)
            if score.confidence >= threshold:
                return _decision(CommitReason.MODEL, context, score, prediction, looks, ending, threshold)
        await sleep_until(context, wait_ms)
        return _decision(CommitReason.TIMEOUT, context, score, prediction, looks, ending, threshold)

    def _score(self, prediction: TurnPrediction | None, look_ms: int, words: WordEvidence, shape: Prosody,
               looks: list[int]) -> Score:
        if prediction is not None:
            looks.append(look_ms)
        probability = None if prediction is None else prediction.probability
        return self.combiner.score(feature_vector(probability, look_ms, words, shape, self.combiner.features))


def _decision(reason: CommitReason, context: TurnContext, score: Score, prediction: TurnPrediction | None,
              looks: list[int], ending: TextEnding | None, threshold: float) -> Decision:
    committed = reason is CommitReason.MODEL
    return Decision(reason, context.waited_ms(), None if prediction is None else prediction.probability, threshold,
                    None if prediction is None else round(prediction.total_ms, 2), ending,
                    confidence=round(score.confidence, 4), look_ms=looks[-1] if committed else None,
                    looks_ms=tuple(looks), decided_by=score.decided_by(committed),
                    evidence={group: round(value, 3) for group, value in score.contributions.items()})


async def _owned_look(future: asyncio.Future[TurnPrediction] | None, remaining_ms: float) -> TurnPrediction | None:
    """A second look's prediction, which this decision started and so owns: when the decision is
    cancelled (speech resumed) or the answer comes too late, the run is cancelled too, so it no
    longer counts as the seat's one run at a time, and a run still queued for the model's thread
    never starts (one already running finishes; runs are short)."""
    try:
        return await answer_within(future, remaining_ms)
    finally:
        if future is not None and not future.done():
            future.cancel()


# One thread of its own: asyncio's default pool also serves uploads, file cuts and warm-up, and a
# decision queued behind them could outlast its wait_ms (measured once: 1.95 s for a 300 ms wait behind six
# 2 s jobs). The work is ~15-25 ms per final (the text view; the rest is a few ms of numpy), so one
# thread serves every seat, and the text model's one session is never run twice at once.
_EVIDENCE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turn-evidence")


async def _evidence(context: TurnContext, text_model: TurnTextModel | None, weighs_prosody: bool,
                    wait_ms: float) -> tuple[WordEvidence, Prosody]:
    """The words' evidence (with the text view's log-odds when the policy has one) and, when the
    weights weigh it, the prosody of the turn's end, off the event loop. Bounded by ``wait_ms``:
    past it the words count by rule alone (the text view has no opinion) and the prosody is neutral.
    A run already started finishes (a thread cannot be stopped; ~15-25 ms); one still queued is dropped."""
    audio = context.look.audio() if context.look is not None and weighs_prosody else None
    end_score = None if text_model is None else _log_odds(text_model)

    def work() -> tuple[WordEvidence, Prosody]:
        return word_evidence(context.text, end_score), prosody(audio) if audio is not None and audio.size else NEUTRAL

    running = asyncio.get_running_loop().run_in_executor(_EVIDENCE_THREAD, work)
    try:
        # not shielded: a run still queued when the wait ends (or the decision is cancelled) is
        # dropped, so stale runs never pile up on the one thread ahead of later decisions
        return await asyncio.wait_for(running, max(0.0, wait_ms - context.waited_ms()) / 1000.0)
    except asyncio.TimeoutError:  # not the builtin on 3.10
        log.warning("the text view did not answer within the turn's wait; it has no opinion on this turn")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the turn's evidence failed; the text view has no opinion on this turn")
    return word_evidence(context.text), NEUTRAL


def _answered(future: asyncio.Future[TurnPrediction] | None) -> TurnPrediction | None:
    """The model's answer if it has already come (without waiting for it), else None."""
    if future is None or not future.done() or future.cancelled():
        return None
    failure = future.exception()
    if failure is not None:
        log.warning("end-of-turn model failed (%s); the commit carries no p", failure)
        return None
    return future.result()


def _log_odds(text_model: TurnTextModel) -> Callable[[str], float | None]:
    def score(text: str) -> float | None:
        answer = text_model.end_of_turn(text)
        return None if answer is None else answer.log_odds

    return score
