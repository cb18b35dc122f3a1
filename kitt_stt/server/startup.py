"""Loading what one server process serves (engine plan, end-of-turn model and policy, VAD model)
and building its app: ``kitt-stt serve`` does it once, or each of ``server.workers`` processes does
it for itself (server/workers.py): models are per process, nothing is shared between workers."""

from __future__ import annotations

import time

from fastapi import FastAPI

from kitt_stt.asr.factory import plan_engine
from kitt_stt.asr.providers import ProviderError
from kitt_stt.asr.sense_voice_model import ModelError
from kitt_stt.config.schema import AppConfig
from kitt_stt.models.vad_model import prepare_vad
from kitt_stt.observability.logbuffer import RecentLogBuffer
from kitt_stt.ops.trt_cache import prepare_serve
from kitt_stt.server.app import create_app
from kitt_stt.turn.combiner import CombinerError
from kitt_stt.turn.policy_factory import build_policy, load_text_model
from kitt_stt.turn.text_model import TextModelError
from kitt_stt.turnsense.model import TurnModelError
from kitt_stt.turnsense.runner import build_turn_model


class StartupError(Exception):
    """What could not be loaded, worded for the operator (``kitt-stt serve`` prints it and exits 1)."""


def load_app(config: AppConfig, log_buffer: RecentLogBuffer | None) -> FastAPI:
    started = time.perf_counter()
    try:
        config = prepare_serve(config)  # TensorRT: the keyed engine directory, its EP-context model if built
        plan = plan_engine(config)  # checks now; the engine itself is built once /healthz answers
    except (ModelError, ProviderError, ValueError, OSError) as exc:
        raise StartupError(f"cannot load the ASR model: {exc}") from exc
    try:
        turn_model = build_turn_model(config)
    except (ModelError, TurnModelError) as exc:
        raise StartupError(f"cannot load the end-of-turn model: {exc}") from exc
    try:
        # each seat builds its own policy around the one text model read here; bad weights fail now
        text_model = load_text_model(config, turn_model is not None)
        build_policy(config, turn_model is not None, text_model)
    except (CombinerError, ModelError, TextModelError) as exc:
        raise StartupError(f"cannot load the end-of-turn decision: {exc}") from exc
    try:
        config = prepare_vad(config)
    except ModelError as exc:
        raise StartupError(f"cannot load the VAD model: {exc}") from exc
    return create_app(config, plan, turn_model, text_model=text_model, log_buffer=log_buffer,
                      load_seconds=time.perf_counter() - started)
