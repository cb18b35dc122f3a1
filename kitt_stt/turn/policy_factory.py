"""The end-of-turn policy a connection's seats use, from ``turn:`` (docs/turns.md)."""

from __future__ import annotations

from kitt_stt.config.schema import AppConfig, TurnPolicy
from kitt_stt.pipeline.eot import EotPolicy, HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.turn.combiner import WEIGHTS_FILE, load_combiner
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.sentence_end import load_model


def build_policy(config: AppConfig, has_model: bool) -> EotPolicy:
    """Silence only without a model; otherwise the fused decision or, if chosen, TurnSense alone."""
    turn = config.turn
    hold = HoldRule.from_config(turn)
    if not has_model:
        return SilenceTimeoutPolicy(turn.wait_ms, hold)
    if turn.policy is TurnPolicy.TURNSENSE:
        return TurnSensePolicy(turn.threshold, turn.wait_ms, hold, turn.eager_threshold)
    # the first prediction runs when a pause closes the last chunk, or at the segment's end without chunking
    first_look_ms = config.asr.chunk_pause_ms or config.vad.silence_ms
    settings = FusedSettings(turn.fused_threshold, turn.wait_ms, tuple(turn.fused_looks_ms), config.vad.silence_ms,
                             turn.eager_threshold, first_look_ms)
    return FusedPolicy(settings, load_combiner(turn.fused_weights or WEIGHTS_FILE), hold)


def load_at_start(policy: EotPolicy) -> None:
    """Read what the policy reads lazily now, at start-up: a fused policy's sentence-end LM.

    Where pocketsphinx is missing (the Jetson Orin image: no aarch64 wheel) the warning then comes
    in the start-up log, next to the policy chosen, instead of at the first turn, and the first
    turn does not pay the model's read either (docs/turns.md).
    """
    if isinstance(policy, FusedPolicy) and policy.uses_language_model:
        load_model()
