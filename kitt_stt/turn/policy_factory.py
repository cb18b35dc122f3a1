"""The end-of-turn policy a connection's seats use, from ``turn:`` (docs/turns.md)."""

from __future__ import annotations

import threading
from pathlib import Path

from kitt_stt.config.schema import AppConfig, TurnPolicy
from kitt_stt.pipeline.eot import EotPolicy, HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.turn.combiner import WEIGHTS_FILE, Combiner, load_combiner
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.text_model import TurnTextModel

_loading = threading.Lock()
_text_models: dict[tuple[Path, int], TurnTextModel] = {}  # one per process: every seat shares it


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
    combiner = load_combiner(turn.fused_weights or WEIGHTS_FILE)
    return FusedPolicy(settings, combiner, hold, text_model_for(config, combiner))


def text_model_for(config: AppConfig, combiner: Combiner) -> TurnTextModel | None:
    """The process's text view for ``turn.text_model``, installed and read on first use (start-up
    asks first: ``cmd_serve``); None when it is off or the weights do not weigh it."""
    if config.turn.text_model is None or "text_end" not in combiner.features:
        return None
    from kitt_stt.models.registry import resolve_model  # the registry imports every model's installer

    with _loading:
        directory = resolve_model(config.turn.text_model, config.models, setting="turn.text_model",
                                  directory_kind="turn_text").directory
        key = (directory.resolve(), config.turn.num_threads)
        if key not in _text_models:
            _text_models[key] = TurnTextModel(directory, config.turn.num_threads)
        return _text_models[key]
