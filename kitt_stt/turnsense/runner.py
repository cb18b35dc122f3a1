"""Runs end-of-turn predictions off the event loop, on a thread pool of their own."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kitt_stt.config.schema import AppConfig
from kitt_stt.models.registry import resolve_model
from kitt_stt.turnsense.model import MODEL_FILE, TurnPrediction, TurnSenseModel


class TurnModelRunner:
    def __init__(self, model: TurnSenseModel, workers: int = 1) -> None:
        self.model = model
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="turn-model")

    def predict(self, samples: np.ndarray) -> asyncio.Future[TurnPrediction]:
        return asyncio.get_running_loop().run_in_executor(self._executor, self.model.predict, samples)

    def warm_up(self) -> None:
        self.model.predict(np.zeros(16000, dtype=np.int16))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def build_turn_model(config: AppConfig) -> TurnModelRunner | None:
    """The configured end-of-turn model, installed into the cache if needed; ``None`` when off.

    Raises ``ModelError`` or ``TurnModelError`` with a message for the operator.
    """
    turn = config.turn
    if not turn.model:
        return None
    resolved = resolve_model(turn.model, config.models, setting="turn.model", directory_kind="turnsense")
    return TurnModelRunner(TurnSenseModel(resolved.directory / MODEL_FILE, turn.provider, turn.num_threads))
