"""The end-of-turn policy a connection's seats use, from ``turn:`` (docs/turns.md)."""

from __future__ import annotations

import threading
from pathlib import Path

from kitt_stt.config.schema import AppConfig, TurnPolicy
from kitt_stt.pipeline.eot import EotPolicy, HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.turn.combiner import WEIGHTS_FILE, load_combiner
from kitt_stt.turn.fused_policy import FusedPolicy, FusedSettings
from kitt_stt.turn.text_model import TurnTextModel

_loading = threading.Lock()
_text_models: dict[tuple[Path, int], TurnTextModel] = {}  # one per process: every seat shares it


def build_policy(config: AppConfig, has_model: bool, text_model: TurnTextModel | None = None) -> EotPolicy:
    """Silence only without a model; otherwise the fused decision or, if chosen, TurnSense alone.
    ``text_model``: the process's text view (``load_text_model``, read once at start-up; every
    seat's policy shares it), or None to decide without one."""
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
    return FusedPolicy(settings, load_combiner(turn.fused_weights or WEIGHTS_FILE), hold, text_model)


def load_text_model(config: AppConfig, has_model: bool) -> TurnTextModel | None:
    """The process's text view for ``turn.text_model``, resolved (installed if missing) and read
    once: start-up calls it before the first seat, never the event loop. None when the decision
    would not use it: no end-of-turn model, ``turn.policy: turnsense``, ``turn.text_model: null``,
    or weights that do not weigh ``text_end``."""
    spec = text_model_spec(config, has_model)
    if spec is None:
        return None
    from kitt_stt.models.registry import resolve_model  # the registry imports every model's installer

    with _loading:
        directory = resolve_model(spec, config.models, setting="turn.text_model",
                                  directory_kind="turn_text").directory
        key = (directory.resolve(), config.turn.num_threads)
        if key not in _text_models:
            _text_models[key] = TurnTextModel(directory, config.turn.num_threads)
        return _text_models[key]


def text_model_spec(config: AppConfig, has_model: bool = True) -> str | None:
    """``turn.text_model`` when the decision would read it (``load_text_model``), else None; for
    what installs or checks models ahead (``models prepare``, ``doctor``) without loading one."""
    turn = config.turn
    if not has_model or turn.policy is TurnPolicy.TURNSENSE or turn.text_model is None:
        return None
    return turn.text_model if "text_end" in load_combiner(turn.fused_weights or WEIGHTS_FILE).features else None
