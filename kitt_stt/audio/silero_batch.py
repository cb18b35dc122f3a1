"""Silero for every seat at once: the due windows of all seats scored in one onnxruntime run, on a
thread of the detector's own, so that the event loop only hands frames over and gets decisions back.

Scored on the loop (``vad.batch: 0``), each seat pays one onnxruntime call per 32 ms window
(~100 µs with its Python around it) on the thread that also reads every socket; at 60 seats
that loop is saturated. Here a seat's frames go to :meth:`BatchedStream.submit`; the batch thread
takes whatever frames have arrived (waiting at most ``vad.batch_wait_ms`` for more once one has,
so a seat's decision never waits a window for others), runs each seat's front end and buffers
its samples exactly as :class:`~.silero.SileroDetector` does on the loop (the seats' front ends
with one FFT pair for all), stacks the windows that
are due into ``input [B, 576]`` and their seats' states into ``state [2, B, 128]`` (up to
``vad.batch`` rows per run; rows are independent streams, so a seat's probabilities are those of
its own unbatched run), and hands each seat its decisions, in order, through the seat's loop.

The per-seat state lives in the seat's detector: it is kept across batches and dropped with
the seat, as on the loop. A seat that has two windows due (frames that arrived together) has its
second scored in the next run of the same round, after its state has advanced past the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kitt_stt.audio.silero import SileroDetector, SileroModel, load_silero
from kitt_stt.config.schema import VadConfig, VadEngine

log = logging.getLogger(__name__)

Deliver = Callable[[list[bool]], None]


class BatchedStream:
    """One seat's way into the batch thread: frames in (on the loop), decisions back (on the loop)."""

    def __init__(self, batcher: SileroBatcher, detector: SileroDetector, deliver: Deliver,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.detector = detector  # the batch thread's from now on: the loop no longer runs it
        self.deliver = deliver
        self.loop = loop
        self.inbox: deque[np.ndarray] = deque()  # under the batcher's lock
        self.closed = False
        self._batcher = batcher

    def submit(self, frame: np.ndarray) -> None:
        """Hand one 20 ms int16 frame over; its decision comes back through ``deliver``."""
        self._batcher.submit(self, frame)

    def close(self) -> None:
        """The seat is gone: drop what it still has queued and never call it back."""
        self._batcher.close_stream(self)


#: what one pass of the batch thread takes: each seat with its frames, in order
Work = list[tuple[BatchedStream, deque[np.ndarray]]]


class SileroBatcher:
    """The batch thread and its model (``vad.provider``'s session)."""

    def __init__(self, model: SileroModel, max_batch: int, wait_ms: float) -> None:
        self.model = model
        self._max_batch = max(1, max_batch)
        self._wait_s = wait_ms / 1000.0
        self._lock = threading.Condition()
        self._ready: dict[BatchedStream, None] = {}  # streams with frames queued, in arrival order
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="vad-batch", daemon=True)
        #: why the thread stopped scoring (a failed run): the process should be restarted
        self.failure: str | None = None
        #: runs and rows scored so far (the benchmark reads the mean batch size from them)
        self.runs = 0
        self.rows = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def open(self, detector: SileroDetector, deliver: Deliver) -> BatchedStream:
        """A stream for one seat; ``deliver`` is called on the calling loop with each batch of its decisions."""
        return BatchedStream(self, detector, deliver, asyncio.get_running_loop())

    def submit(self, stream: BatchedStream, frame: np.ndarray) -> None:
        with self._lock:
            if stream.closed:
                return
            stream.inbox.append(frame)
            if stream not in self._ready:
                self._ready[stream] = None
                self._lock.notify()

    def close_stream(self, stream: BatchedStream) -> None:
        with self._lock:
            stream.closed = True
            stream.inbox.clear()
            self._ready.pop(stream, None)

    # ----- the batch thread --------------------------------------------------------------------

    def _take(self) -> Work | None:
        """Wait for frames (then up to ``batch_wait_ms`` for more seats'); None when stopping."""
        with self._lock:
            while not self._ready and not self._stopping:
                self._lock.wait()
            deadline = time.monotonic() + self._wait_s
            while not self._stopping and len(self._ready) < self._max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            if self._stopping:
                return None
            work = [(stream, deque(stream.inbox)) for stream in self._ready]
            for stream, _ in work:
                stream.inbox.clear()
            self._ready.clear()
        return work

    def _run(self) -> None:
        while (work := self._take()) is not None:
            sizes = {stream: len(frames) for stream, frames in work}
            try:
                decided = self._score(work)
            except Exception as exc:  # onnxruntime raises its own types; every seat would hang without an answer
                log.exception("vad.batch: scoring failed; the process needs a restart")
                self.failure = f"the VAD batch thread failed: {exc}"
                decided = {stream: [False] * count for stream, count in sizes.items()}
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[BatchedStream, list[bool]]]] = {}
            for stream, decisions in decided.items():
                by_loop.setdefault(stream.loop, []).append((stream, decisions))
            for loop, batch in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop is closed: its seats are gone
                    loop.call_soon_threadsafe(_deliver_all, batch)

    def _score(self, work: Work) -> dict[BatchedStream, list[bool]]:
        """Every frame's decision, per seat and in order; one model run per round of due windows."""
        decided: dict[BatchedStream, list[bool]] = {stream: [] for stream, _ in work}
        work = _heard_together(work)
        due = [(stream, frames, *step) for stream, frames in work
               if (step := _advance(stream.detector, frames, None, decided[stream])) is not None]
        while due:
            for first in range(0, len(due), self._max_batch):
                rows = due[first : first + self._max_batch]
                windows = np.stack([window for _, _, _, window in rows])
                states = np.concatenate([stream.detector.state for stream, _, _, _ in rows], axis=1)
                probabilities, new_states = self.model.probabilities(windows, states)
                self.runs += 1
                self.rows += len(rows)
                for row, (stream, _, _, _) in enumerate(rows):
                    stream.detector.state = new_states[:, row : row + 1].copy()
                    stream.detector.take_probability(float(probabilities[row]))
            due = [(stream, frames, *step) for stream, frames, heard, _ in due
                   if (step := _advance(stream.detector, frames, heard, decided[stream])) is not None]
        return decided


def build_vad_batch(config: VadConfig) -> SileroBatcher | None:
    """The batch thread for ``config`` (not started), or None when seats score on the loop
    (webrtc, or ``vad.batch: 0``). ``vad.model`` must be a directory by now (``prepare_vad``)."""
    if config.engine is not VadEngine.SILERO or config.batch == 0:
        return None
    return SileroBatcher(load_silero(Path(config.model), config.provider), config.batch, config.batch_wait_ms)


def _heard_together(work: Work) -> Work:
    """Every frame through its seat's front end, the seats' n-th frames together (the filter's
    state is the seat's own and does not depend on Silero, so it may run ahead of the scoring)."""
    heard: Work = [(stream, deque()) for stream, _ in work]
    index = 0
    while rows := [row for row, (_, frames) in enumerate(work) if index < len(frames)]:
        outputs = SileroDetector.hear_together([work[row][0].detector for row in rows],
                                               [work[row][1][index] for row in rows])
        for row, output in zip(rows, outputs, strict=True):
            heard[row][1].append(output)
        index += 1
    return heard


def _advance(detector: SileroDetector, frames: deque[np.ndarray], heard: np.ndarray | None,
             decided: list[bool]) -> tuple[np.ndarray, np.ndarray] | None:
    """Run one seat forward until a window is due (returns the frame it is for and the window) or
    its frames (through the front end already) are all decided (None). ``heard``: the frame whose
    window was just scored."""
    while True:
        if heard is not None:
            window = detector.next_window()
            if window is not None:
                return heard, window
            decided.append(detector.judge(heard, detector.speaking))
        if not frames:
            return None
        heard = frames.popleft()
        detector.queue_samples(heard)


def _deliver_all(batch: list[tuple[BatchedStream, list[bool]]]) -> None:
    """On the loop: each open seat gets its decisions; one seat's failure is not another's."""
    for stream, decisions in batch:
        if stream.closed or not decisions:
            continue
        try:
            stream.deliver(decisions)
        except Exception:
            log.exception("vad.batch: a seat failed on its decisions")
