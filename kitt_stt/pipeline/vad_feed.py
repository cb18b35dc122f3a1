"""A seat's frames to its VAD and the events back, in order, wherever the detector runs.

On the loop (webrtc, or Silero with ``vad.batch: 0``) a frame's events come back at once. With
the batch thread (:mod:`kitt_stt.audio.silero_batch`) they come back a batch later, so whatever
the client said after a frame (``vad start``/``stop``, ``finalize``, audio dropped by the rate
limit) must wait until that frame's decision is back: :meth:`VadFeed.after` runs such a call at
once when nothing is in flight, else right after the frames handed over before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import numpy as np

from kitt_stt.audio.silero import SileroDetector
from kitt_stt.audio.silero_batch import BatchedStream, SileroBatcher
from kitt_stt.audio.vad import VadEvent, VadSegmenter
from kitt_stt.config.schema import VadConfig

OnFrame = Callable[[np.ndarray, list[VadEvent]], None]
log = logging.getLogger(__name__)


class VadFeed:
    def __init__(self, config: VadConfig, on_frame: OnFrame, batch: SileroBatcher | None = None) -> None:
        self.segmenter = VadSegmenter(config)
        self._on_frame = on_frame
        self._stream: BatchedStream | None = None
        detector = self.segmenter.detector
        if batch is not None and isinstance(detector, SileroDetector):
            self._stream = batch.open(detector, self._decided)
        #: frames whose decisions are out, and the calls that must follow them
        self._queue: deque[np.ndarray | Callable[[], None]] = deque()
        self._frames_out = 0
        self._waiting: list[asyncio.Future[asyncio.Task[None] | None]] = []

    def frame(self, frame: np.ndarray) -> None:
        """One 20 ms frame: its events go to ``on_frame`` now, or when its decision is back."""
        if self._stream is None:
            self._on_frame(frame, self.segmenter.process(frame))
            return
        self._queue.append(frame)
        self._frames_out += 1
        self._stream.submit(frame)

    def after(self, call: Callable[[], None]) -> None:
        """Run ``call`` once every frame handed over so far has had its events."""
        if self._frames_out:
            self._queue.append(call)
        else:
            call()

    def task_after(self, call: Callable[[], asyncio.Task[None] | None]) -> asyncio.Task[None] | None:
        """:meth:`after` for a call that starts a task (a flush): with nothing in flight its task,
        else a task that waits for the call's turn, then for the task it started (cancelled if the
        seat closes first)."""
        if not self._frames_out:
            return call()
        started: asyncio.Future[asyncio.Task[None] | None] = asyncio.get_running_loop().create_future()

        def run() -> None:
            if not started.done():
                started.set_result(call())
        self._waiting.append(started)
        self._queue.append(run)

        async def when_run() -> None:
            task = await started
            if task is not None:
                await task
        return asyncio.create_task(when_run())

    def _decided(self, decisions: list[bool]) -> None:
        """Each decision pairs with the oldest frame out. A fault in one frame's handling is logged
        and costs that frame alone: leaving the rest of the batch queued would pair every later
        decision with the wrong frame, for the rest of the seat's life."""
        for voiced in decisions:
            frame = self._queue.popleft()
            if not isinstance(frame, np.ndarray):
                raise RuntimeError("a VAD decision came back for a client call, not a frame")
            self._frames_out -= 1
            self._safely(self._frame_decided, frame, voiced)
            while self._queue and not isinstance(self._queue[0], np.ndarray):
                self._safely(self._queue.popleft())  # type: ignore[arg-type]
        self._waiting = [future for future in self._waiting if not future.done()]

    def _frame_decided(self, frame: np.ndarray, voiced: bool) -> None:
        self._on_frame(frame, self.segmenter.decided(frame, voiced))

    @staticmethod
    def _safely(call: Callable[..., None], *args: object) -> None:
        try:
            call(*args)
        except Exception:
            log.exception("a seat's VAD event failed; the seat goes on with the next frame")

    @property
    def nbytes(self) -> int:
        """The segmenter's buffers and the frames whose decisions are out."""
        return self.segmenter.buffered_bytes + sum(item.nbytes for item in self._queue if isinstance(item, np.ndarray))

    def close(self) -> None:
        """The seat is closed: nothing more comes back; calls still waiting are dropped."""
        if self._stream is not None:
            self._stream.close()
        self.segmenter.reset(detector=self._stream is None)
        self._queue.clear()
        self._frames_out = 0
        for future in self._waiting:
            future.cancel()
        self._waiting.clear()
