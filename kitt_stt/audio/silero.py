"""Silero VAD (v6, MIT) on our onnxruntime: a small recurrent network that hears speech, not energy.

The model reads 512-sample windows (32 ms at 16 kHz) with the last 64 samples of the window
before as context, and carries a recurrent state from window to window. Our frames are 20 ms, so
a seat buffers samples until a window is full; each frame's decision is that of the newest window
(at most 32 ms old). One inference session serves every seat (onnxruntime sessions are
thread-safe and the model is 2 MB); the per-seat state is ~1.5 KB. Scored here, a seat's windows
run on the event loop one at a time (``vad.batch: 0``); :mod:`.silero_batch` scores the due
windows of all seats in one run on a thread of its own, with the same per-seat code.

Decisions use the model's own hysteresis: speech starts when the probability reaches
``vad.threshold`` and stops when it falls below ``threshold - vad.release``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort

from kitt_stt.asr.providers import ORT_NAMES, ProviderError
from kitt_stt.audio.detector import SAMPLE_RATE, SpeechDetector
from kitt_stt.config.schema import Provider, VadConfig

WINDOW_SAMPLES = 512
CONTEXT_SAMPLES = 64
STATE_SHAPE = (2, 1, 128)
MODEL_FILE = "silero_vad.onnx"


class SileroModel:
    """The shared inference session. ``probability`` advances one seat's state by one window;
    ``probabilities`` advances many seats' at once (the state's batch axis holds independent
    streams: a row's result is the same, bit for bit, whatever else is in the batch)."""

    def __init__(self, path: Path, provider: Provider = Provider.CPU) -> None:
        wanted = ORT_NAMES[provider]
        if wanted not in ort.get_available_providers():
            raise ProviderError(
                f"vad.provider={provider.value}: this onnxruntime build has no {wanted} "
                f"(available: {', '.join(ort.get_available_providers())}); install the 'gpu' extra on a "
                "CUDA machine or set vad.provider: cpu")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one window is ~0.1 ms of work: threads would only add overhead
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(path), options, providers=[wanted])
        active = self._session.get_providers()
        if not active or active[0] != wanted:
            raise ProviderError(
                f"vad.provider={provider.value}: the session runs on {', '.join(active) or 'nothing'}, not "
                f"{wanted} (onnxruntime fell back); refusing to run elsewhere silently")
        self.provider = provider
        self._sample_rate = np.array(SAMPLE_RATE, dtype=np.int64)

    def probability(self, window: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        """``window``: context + 512 samples, float32 in [-1, 1]. Returns (p, the new state)."""
        probabilities, new_state = self.probabilities(window[np.newaxis, :], state)
        return float(probabilities[0]), new_state

    def probabilities(self, windows: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``windows`` [B, 576] and ``states`` [2, B, 128]: one run for B seats; (p [B], new states)."""
        output, new_states = self._session.run(None, {"input": windows, "state": states, "sr": self._sample_rate})
        return output[:, 0], new_states


@lru_cache(maxsize=4)
def load_silero(directory: Path, provider: Provider = Provider.CPU) -> SileroModel:
    """One session per model directory and provider for the whole process."""
    path = directory / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"vad.model: {path} not found (install it with `kitt-stt models pull silero-vad`)")
    return SileroModel(path, provider)


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
        self.state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self.speaking = False
        #: the newest window's probability (for the benchmark and tracing)
        self.last_probability = 0.0

    def _engine_says_speech(self, frame: np.ndarray) -> bool:
        self.queue_samples(frame)
        while (window := self.next_window()) is not None:
            probability, self.state = self._model.probability(window, self.state)
            self.take_probability(probability)
        return self.speaking

    def queue_samples(self, frame: np.ndarray) -> None:
        """Buffer one filtered frame (int16 scale) until a window is full."""
        self._pending = np.concatenate([self._pending, (frame / 32768.0).astype(np.float32)])

    def next_window(self) -> np.ndarray | None:
        """The next due window with its context (576 samples), or None while fewer than 512 wait;
        its probability must be given to :meth:`take_probability` before the next is taken."""
        if self._pending.shape[0] < WINDOW_SAMPLES:
            return None
        window, self._pending = self._pending[:WINDOW_SAMPLES], self._pending[WINDOW_SAMPLES:]
        with_context = np.concatenate([self._context, window])
        self._context = window[-CONTEXT_SAMPLES:]
        return with_context

    def take_probability(self, probability: float) -> None:
        """The newest window's score (``state`` already advanced past it): the hysteresis."""
        self.last_probability = probability
        if probability >= self._start:
            self.speaking = True
        elif probability < self._stop:
            self.speaking = False

    def reset(self) -> None:
        super().reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self.state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self.speaking = False

    @property
    def nbytes(self) -> int:
        return super().nbytes + self._pending.nbytes + self._context.nbytes + self.state.nbytes
