"""One queue of decode jobs for the whole process, served by worker threads.

Why a scheduler instead of ``run_in_executor``: a plain FIFO executor lets a segment's final
wait behind every interim queued before it, and lets a fast talker pile up interims that are
stale before they run.  Here:

* finals run strictly before interims (a heap ordered by priority, then arrival);
* a seat has at most one pending interim: a newer request replaces the older one, whose
  awaiter gets ``None`` (it is stale anyway);
* a worker takes up to ``max_batch`` queued jobs of the same priority and decodes them in one
  engine call;
* all jobs of a closed connection can be cancelled at once.

Results are handed back to the event loop with ``call_soon_threadsafe``; nothing here blocks
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer
from kitt_stt.observability.trace import Tracer, Track

log = logging.getLogger(__name__)


class Priority(IntEnum):
    FINAL = 0
    CHUNK = 1  # a closed chunk of an open segment: the final will need it
    INTERIM = 2


@dataclass(frozen=True)
class TraceTag:
    """Where a job's spans go in the trace, and the ids they carry."""

    track: Track
    args: dict[str, Any]


#: ``observer(priority, queue_seconds, decode_seconds)`` after every decoded job (metrics).
DecodeObserver = Callable[["Priority", float, float], None]


@dataclass(frozen=True)
class DecodeOutcome:
    result: AsrResult
    queue_ms: float
    decode_ms: float
    batch_size: int


@dataclass(order=True)
class _Job:
    priority: int
    order: int
    request: AsrRequest = field(compare=False)
    owner: Hashable = field(compare=False)
    coalesce_key: Hashable | None = field(compare=False)
    future: asyncio.Future = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    submitted: float = field(compare=False)
    trace: TraceTag | None = field(default=None, compare=False)
    kind: Priority = field(default=Priority.FINAL, compare=False)
    dropped: bool = field(default=False, compare=False)


def _settle(future: asyncio.Future, value: object = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _post(job: _Job, value: object = None, error: BaseException | None = None) -> None:
    """Settle ``job``'s future from a worker thread; a loop that already closed has no awaiter."""
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(_settle, job.future, value, error)


class InferenceScheduler:
    def __init__(self, engine: AsrEngine, workers: int = 1, max_batch: int = 1, tracer: Tracer | None = None,
                 observer: DecodeObserver | None = None, fifo: bool = False,
                 interim_budget_ms: float | None = None) -> None:
        self.engine = engine
        self._fifo = fifo
        self._interim_budget_s = None if interim_budget_ms is None else interim_budget_ms / 1000.0
        self._tracer = tracer
        self._observer = observer
        self._workers = workers
        self._max_batch = max_batch
        self._heap: list[_Job] = []
        self._pending_interims: dict[Hashable, _Job] = {}
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self.skipped_interims = 0

    def start(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"asr-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            for job in self._heap:
                job.dropped = True
                _post(job)
            self._heap.clear()
            self._pending_interims.clear()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return sum(1 for job in self._heap if not job.dropped)

    def submit(self, request: AsrRequest, priority: Priority, owner: Hashable,
               coalesce_key: Hashable | None = None,
               trace: TraceTag | None = None) -> asyncio.Future[DecodeOutcome | None]:
        """Queue a decode; the future yields the outcome, or ``None`` if it was superseded/cancelled."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[DecodeOutcome | None] = loop.create_future()
        if self._fifo:  # naive mode: one FIFO queue and no coalescing, as the old service had
            rank, coalesce_key = 0, None
        else:
            rank = int(priority)
        job = _Job(rank, next(self._counter), request, owner, coalesce_key, future, loop, time.perf_counter(), trace,
                   kind=priority)
        with self._cond:
            if self._stopping:
                future.set_result(None)
                return future
            if coalesce_key is not None:
                older = self._pending_interims.pop(coalesce_key, None)
                if older is not None:
                    older.dropped = True
                    _settle(older.future, None)
                self._pending_interims[coalesce_key] = job
            heapq.heappush(self._heap, job)
            self._cond.notify()
        return future

    def cancel_owner(self, owner: Hashable) -> int:
        """Drop every queued job of ``owner`` (a closed connection); returns how many."""
        dropped = 0
        with self._cond:
            for job in self._heap:
                if job.owner == owner and not job.dropped:
                    job.dropped = True
                    dropped += 1
                    if job.coalesce_key is not None:
                        self._pending_interims.pop(job.coalesce_key, None)
                    _post(job)
        return dropped

    def _take_batch(self) -> list[_Job] | None:
        """The next batch (None: stopping; empty: everything popped was stale)."""
        with self._cond:
            while True:
                while self._heap and self._heap[0].dropped:
                    heapq.heappop(self._heap)
                if self._heap or self._stopping:
                    break
                self._cond.wait()
            if self._stopping:
                return None
            first = heapq.heappop(self._heap)
            while self._stale(first):
                if not self._heap:
                    return []
                first = heapq.heappop(self._heap)
            batch = [first]
            while self._heap and len(batch) < self._max_batch:
                top = self._heap[0]
                if top.dropped or self._stale(top):
                    heapq.heappop(self._heap)
                    continue
                if top.priority != first.priority:
                    break
                batch.append(heapq.heappop(self._heap))
            for job in batch:
                if job.coalesce_key is not None and self._pending_interims.get(job.coalesce_key) is job:
                    del self._pending_interims[job.coalesce_key]
            return batch

    def _stale(self, job: _Job) -> bool:
        """An interim that waited longer than the budget is skipped: under load the interim cadence
        stretches instead of the queue growing (its awaiter gets ``None``).  Call with the lock held."""
        budget = self._interim_budget_s
        if job.dropped or budget is None or job.kind is not Priority.INTERIM or self._fifo:
            return job.dropped
        if time.perf_counter() - job.submitted <= budget:
            return False
        job.dropped = True
        if job.coalesce_key is not None and self._pending_interims.get(job.coalesce_key) is job:
            del self._pending_interims[job.coalesce_key]
        self.skipped_interims += 1
        _post(job)
        return True

    def _work(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            if not batch:
                continue
            started = time.perf_counter()
            timer = StageTimer()
            try:
                results = self.engine.decode_batch([job.request for job in batch], timer)
            except Exception as exc:  # one bad batch must not kill the worker
                log.exception("decode failed for a batch of %d", len(batch))
                for job in batch:
                    _post(job, None, exc)
                continue
            finished = time.perf_counter()
            for job, result in zip(batch, results, strict=True):
                outcome = DecodeOutcome(result, (started - job.submitted) * 1000.0, (finished - started) * 1000.0,
                                        len(batch))
                _post(job, outcome)
                if self._observer is not None:
                    self._observer(job.kind, started - job.submitted, finished - started)
                self._trace(job, started, timer, len(batch))

    def _trace(self, job: _Job, started: float, timer: StageTimer, batch_size: int) -> None:
        tracer = self._tracer
        if tracer is None or job.trace is None or not tracer.enabled:
            return
        kind = job.kind.name.lower()
        args = {**job.trace.args, "kind": kind, "batch": batch_size}
        tracer.add("scheduler.queue_wait", "scheduler", tracer.to_us(job.submitted),
                   int((started - job.submitted) * 1e6), job.trace.track, args)
        for stage, begin, end in timer.stages:
            tracer.add(f"asr.{stage}", "asr", tracer.to_us(begin), int((end - begin) * 1e6), job.trace.track, args)
