"""Silero VAD (v6, MIT) on our onnxruntime: a small recurrent network that hears speech, not energy.

The model reads 512-sample windows (32 ms at 16 kHz) with the last 64 samples of the window
before as context, and carries a recurrent state from window to window. Our frames are 20 ms, so
a seat buffers samples until a window is full; each frame's decision is that of the newest window
(at most 32 ms old). One inference session serves every seat (onnxruntime sessions are
thread-safe and the model is 2 MB); the per-seat state is ~1.5 KB.

Decisions use the model's own hysteresis: speech starts when the probability reaches
``vad.threshold`` and stops when it falls below ``threshold - vad.release``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort

from kitt_stt.audio.detector import SAMPLE_RATE, SpeechDetector
from kitt_stt.config.schema import VadConfig

WINDOW_SAMPLES = 512
CONTEXT_SAMPLES = 64
STATE_SHAPE = (2, 1, 128)
MODEL_FILE = "silero_vad.onnx"


class SileroModel:
    """The shared inference session; ``probability`` advances one seat's state by one window."""

    def __init__(self, path: Path) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one window is ~0.1 ms of work: threads would only add overhead
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._sample_rate = np.array(SAMPLE_RATE, dtype=np.int64)

    def probability(self, window: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        """``window``: context + 512 samples, float32 in [-1, 1]. Returns (p, the new state)."""
        output, new_state = self._session.run(
            None, {"input": window[np.newaxis, :], "state": state, "sr": self._sample_rate})
        return float(output[0, 0]), new_state


@lru_cache(maxsize=4)
def load_silero(directory: Path) -> SileroModel:
    """One session per model directory for the whole process."""
    path = directory / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"vad.model: {path} not found (install it with `kitt-stt models pull silero-vad`)")
    return SileroModel(path)


#: Silero does not hear stationary noise as speech; a gate would only cut speech at low SNR
DEFAULT_GATE_DB = 0.0


class SileroDetector(SpeechDetector):
    def __init__(self, config: VadConfig, model: SileroModel) -> None:
        super().__init__(config, DEFAULT_GATE_DB)
        self._model = model
        self._start = config.threshold
        self._stop = max(0.0, config.threshold - config.release)
        self._pending = np.zeros(0, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._speaking = False
        #: the newest window's probability (for the benchmark and tracing)
        self.last_probability = 0.0

    def _engine_says_speech(self, frame: np.ndarray) -> bool:
        self._pending = np.concatenate([self._pending, (frame / 32768.0).astype(np.float32)])
        while self._pending.shape[0] >= WINDOW_SAMPLES:
            window, self._pending = self._pending[:WINDOW_SAMPLES], self._pending[WINDOW_SAMPLES:]
            self.last_probability, self._state = self._model.probability(
                np.concatenate([self._context, window]), self._state)
            self._context = window[-CONTEXT_SAMPLES:]
            if self.last_probability >= self._start:
                self._speaking = True
            elif self.last_probability < self._stop:
                self._speaking = False
        return self._speaking

    def reset(self) -> None:
        super().reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._speaking = False

    @property
    def nbytes(self) -> int:
        return super().nbytes + self._pending.nbytes + self._context.nbytes + self._state.nbytes
