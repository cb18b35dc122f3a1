"""The end-of-turn model on onnxruntime, with its own provider setting.

One session per process, called from a small thread pool of its own so a decision never
waits behind ASR decodes (and ASR never waits behind it).  The session gets one inter-op
thread and no spinning: on small CPUs spinning threads fight numpy and the ASR workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from kitt_stt.config.schema import Provider
from kitt_stt.turnsense.features import log_mel

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
_ORT_PROVIDERS = {Provider.CPU: "CPUExecutionProvider", Provider.CUDA: "CUDAExecutionProvider"}


class TurnModelError(Exception):
    """The end-of-turn model cannot run as configured."""


@dataclass(frozen=True)
class TurnPrediction:
    probability: float
    features_ms: float
    model_ms: float
    started: float = 0.0  # time.perf_counter() when feature extraction began

    @property
    def total_ms(self) -> float:
        """Features plus model: what one decision costs."""
        return self.features_ms + self.model_ms


class TurnSenseModel:
    def __init__(self, path: Path, provider: Provider = Provider.CPU, num_threads: int = 1) -> None:
        if provider not in _ORT_PROVIDERS:
            raise TurnModelError(f"turn.provider={provider.value} is not supported; use cpu or cuda")
        if not path.is_file():
            raise TurnModelError(f"{path}: end-of-turn model file missing (run `kitt-stt models pull turnsense`)")
        wanted = _ORT_PROVIDERS[provider]
        if wanted not in ort.get_available_providers():
            raise TurnModelError(
                f"turn.provider={provider.value}: onnxruntime here has no {wanted} "
                f"(available: {', '.join(ort.get_available_providers())}); install the 'gpu' extra on a "
                "CUDA machine or set turn.provider: cpu"
            )
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = num_threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(str(path), options, providers=[wanted])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise TurnModelError(f"{path}: cannot load the end-of-turn model: {exc}") from None
        active = self._session.get_providers()
        if active[0] != wanted:
            raise TurnModelError(
                f"turn.provider={provider.value}: the session runs on {active[0]}, not {wanted}; refusing to "
                "fall back silently"
            )
        self.provider = provider
        self._input = self._session.get_inputs()[0].name

    def predict(self, samples: np.ndarray) -> TurnPrediction:
        """Probability that the turn in ``samples`` (int16, 16 kHz, up to 8 s used) is complete."""
        started = time.perf_counter()
        features = log_mel(samples)[None, :, :]
        mid = time.perf_counter()
        (output,) = self._session.run(None, {self._input: features})
        done = time.perf_counter()
        return TurnPrediction(float(np.asarray(output).reshape(-1)[0]), (mid - started) * 1000.0,
                              (done - mid) * 1000.0, started)
