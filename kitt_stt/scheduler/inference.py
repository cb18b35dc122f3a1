"""One queue of decode jobs for the whole process, served by worker threads.

Why a scheduler instead of ``run_in_executor``: a plain FIFO executor lets a segment's final
wait behind every interim queued before it, and lets a fast talker pile up interims that are
stale before they run.  Here:

* finals run strictly before chunks, chunks before interims; within a priority, connections
  take turns (round-robin), so one connection's flood delays another's final by at most one
  engine call per worker;
* a closed segment's queued chunk decodes are promoted to final priority;
* a seat has at most one pending interim: a newer request replaces the older one, whose
  awaiter gets ``None`` (it is stale anyway);
* a worker takes up to ``max_batch`` queued jobs of the same priority and decodes them in one
  engine call;
* all jobs of a closed connection can be cancelled at once;
* a failing batch is retried request by request, and a worker that dies anyway is reported
  (``failure``) so ``/readyz`` turns 503 instead of the service hanging silently.

Results are handed back to the event loop with ``call_soon_threadsafe``; nothing here blocks
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer
from kitt_stt.observability.trace import Tracer, Track

log = logging.getLogger(__name__)


class Priority(IntEnum):
    FINAL = 0
    CHUNK = 1  # a closed chunk of an open segment: the final will need it
    INTERIM = 2
    FILE = 3  # an uploaded file (POST /v1/audio/transcriptions): never ahead of live audio


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


@dataclass
class _Job:
    rank: int  # index of the lane the job waits in (promotion moves a chunk to the final lane)
    request: AsrRequest | None  # None once dropped: a lane entry waiting to be skipped holds no audio
    owner: Hashable
    lane_key: Hashable  # whose turn the job waits for: its owner, or one shared key in naive mode
    coalesce_key: Hashable | None
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    submitted: float
    trace: TraceTag | None = None
    kind: Priority = Priority.FINAL
    dropped: bool = False


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


class _Lane:
    """Jobs of one priority: a FIFO per owner (connection), served round-robin between owners.

    Why per owner: with one FIFO, a connection that queues a hundred finals makes every other
    connection's final wait for all of them; round-robin bounds that wait to one job per owner
    ahead in the rotation. Entries that were dropped or promoted away stay in their deque and are
    skipped when reached (cheaper than searching deques on every cancellation).
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._owners: OrderedDict[Hashable, deque[_Job]] = OrderedDict()

    def push(self, job: _Job) -> None:
        jobs = self._owners.get(job.lane_key)
        if jobs is None:
            jobs = self._owners[job.lane_key] = deque()
        jobs.append(job)

    def pop(self) -> _Job | None:
        """The next live job, taking owners in turn."""
        while self._owners:
            owner, jobs = next(iter(self._owners.items()))
            job = jobs.popleft()
            if jobs:
                self._owners.move_to_end(owner)
            else:
                del self._owners[owner]
            if not job.dropped and job.rank == self.rank:
                return job
        return None

    def live(self) -> list[_Job]:
        return [job for queue in self._owners.values() for job in queue if not job.dropped and job.rank == self.rank]

    def forget(self, lane_key: Hashable) -> None:
        self._owners.pop(lane_key, None)

    def clear(self) -> None:
        self._owners.clear()


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
        # naive mode keeps the old single FIFO (the benchmark baseline): one lane, one owner key
        self._lanes = [_Lane(0)] if fifo else [_Lane(int(priority)) for priority in Priority]
        self._depth = 0
        self._pending_interims: dict[Hashable, _Job] = {}
        self._queued_chunks: dict[asyncio.Future, _Job] = {}
        self._outstanding: Counter[Hashable] = Counter()  # event-loop side: submitted, not yet settled
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self.failure: str | None = None  # why a worker thread died; the service is then unready
        self.skipped_interims = 0

    def start(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"asr-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Drop what is queued (awaiters get ``None``) and join the workers within ``timeout_s`` in
        all: a worker stuck in a decode must not stretch shutdown past the pod's grace period."""
        with self._cond:
            self._stopping = True
            self._fail_queued(None)
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def _fail_queued(self, error: BaseException | None) -> None:
        """Answer every queued job (``None``, or ``error``) and empty the lanes. Lock held."""
        for lane in self._lanes:
            for job in lane.live():
                job.dropped = True
                job.request = None
                _post(job, None, error)
            lane.clear()
        self._depth = 0
        self._pending_interims.clear()
        self._queued_chunks.clear()

    @property
    def queue_depth(self) -> int:
        """Decodes queued and not yet taken by a worker, over all connections."""
        with self._cond:
            return self._depth

    def outstanding(self, owner: Hashable) -> int:
        """Decodes of ``owner`` submitted and not yet answered (queued or running). Event loop only."""
        return self._outstanding[owner]

    def submit(self, request: AsrRequest, priority: Priority, owner: Hashable,
               coalesce_key: Hashable | None = None,
               trace: TraceTag | None = None) -> asyncio.Future[DecodeOutcome | None]:
        """Queue a decode; the future yields the outcome, or ``None`` if it was superseded/cancelled."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[DecodeOutcome | None] = loop.create_future()
        if self._fifo:
            rank, coalesce_key, lane_key = 0, None, None
        else:
            rank, lane_key = int(priority), owner
        job = _Job(rank, request, owner, lane_key, coalesce_key, future, loop, time.perf_counter(), trace,
                   kind=priority)
        with self._cond:
            if self.failure is not None:  # nobody would ever decode it: fail now, do not hang
                future.set_exception(RuntimeError(f"the inference service has failed: {self.failure}"))
                return future
            if self._stopping:
                future.set_result(None)
                return future
            if coalesce_key is not None:
                older = self._pending_interims.pop(coalesce_key, None)
                if older is not None:
                    self._drop(older, settle_now=True)
                self._pending_interims[coalesce_key] = job
            if priority is Priority.CHUNK and not self._fifo:
                self._queued_chunks[future] = job
            self._lanes[rank].push(job)
            self._depth += 1
            self._cond.notify()
        self._outstanding[owner] += 1
        future.add_done_callback(lambda _: self._answered(owner))
        return future

    def _answered(self, owner: Hashable) -> None:
        self._outstanding[owner] -= 1
        if self._outstanding[owner] <= 0:
            del self._outstanding[owner]

    def promote(self, decodes: list[asyncio.Future[DecodeOutcome | None]]) -> int:
        """Move still-queued chunk decodes to final priority (their segment closed: its final
        needs them now, and at chunk priority an endless stream of other finals could starve them)."""
        moved = 0
        with self._cond:
            for future in decodes:
                job = self._queued_chunks.pop(future, None)
                if job is None or job.dropped:
                    continue
                job.rank = int(Priority.FINAL)
                self._lanes[job.rank].push(job)
                moved += 1
            if moved:
                self._cond.notify()
        return moved

    def cancel_owner(self, owner: Hashable) -> int:
        """Drop every queued job of ``owner`` (a closed connection); returns how many."""
        dropped = 0
        with self._cond:
            for lane in self._lanes:
                for job in lane.live():
                    if job.owner == owner:
                        self._drop(job)
                        dropped += 1
                if not self._fifo:
                    lane.forget(owner)
        return dropped

    def _drop(self, job: _Job, settle_now: bool = False) -> None:
        """Take a queued job out (its awaiter gets ``None``). Call with the lock held."""
        if job.dropped:
            return
        job.dropped = True
        job.request = None
        self._depth -= 1
        if job.coalesce_key is not None and self._pending_interims.get(job.coalesce_key) is job:
            del self._pending_interims[job.coalesce_key]
        self._queued_chunks.pop(job.future, None)
        if settle_now:
            _settle(job.future, None)
        else:
            _post(job)

    def _next_job(self) -> _Job | None:
        """The next live job of the most urgent lane. Call with the lock held."""
        for lane in self._lanes:
            while (job := lane.pop()) is not None:
                if not self._stale(job):
                    return job
        return None

    def _take_batch(self) -> list[_Job] | None:
        """The next batch (None: stopping); up to ``max_batch`` jobs of one priority, owners in turn."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                first = self._next_job()
                if first is not None:
                    break
                self._cond.wait()
            self._taken(first)
            batch = [first]
            lane = self._lanes[first.rank]
            while len(batch) < self._max_batch and (job := lane.pop()) is not None:
                if not self._stale(job):
                    self._taken(job)
                    batch.append(job)
            return batch

    def _taken(self, job: _Job) -> None:
        self._depth -= 1
        self._queued_chunks.pop(job.future, None)
        if job.coalesce_key is not None and self._pending_interims.get(job.coalesce_key) is job:
            del self._pending_interims[job.coalesce_key]

    def _stale(self, job: _Job) -> bool:
        """An interim that waited longer than the budget is skipped: under load the interim cadence
        stretches instead of the queue growing (its awaiter gets ``None``).  Call with the lock held."""
        budget = self._interim_budget_s
        if budget is None or job.kind is not Priority.INTERIM or self._fifo:
            return False
        if time.perf_counter() - job.submitted <= budget:
            return False
        self.skipped_interims += 1  # before the awaiter can hear of it
        self._drop(job)
        return True

    def _work(self) -> None:
        batch: list[_Job] | None = None
        try:
            while (batch := self._take_batch()) is not None:
                try:
                    self._run(batch)
                except Exception as exc:  # e.g. an engine answering with the wrong number of results
                    log.exception("decode failed for a batch of %d", len(batch))
                    for job in batch:
                        _post(job, None, exc)
        except BaseException as exc:  # whatever it was: say so, and answer every awaiter
            failure = f"{threading.current_thread().name} died: {exc!r}"
            log.critical("inference worker stopped: %s; the service reports unhealthy", failure, exc_info=True)
            error = RuntimeError(f"the inference service has failed: {failure}")
            for job in batch or ():
                _post(job, None, error)
            with self._cond:  # queued and future decodes fail at once rather than wait for nobody
                self.failure = failure
                self._fail_queued(error)
                self._cond.notify_all()

    def _run(self, batch: list[_Job]) -> None:
        started = time.perf_counter()
        timer = StageTimer()
        requests = [job.request for job in batch if job.request is not None]
        try:
            results: list[AsrResult | BaseException] = list(self.engine.decode_batch(requests, timer))
        except Exception as exc:
            if len(batch) == 1:
                log.exception("decode failed")
                _post(batch[0], None, exc)
                return
            # one bad request must not fail the others: decode each alone to find it
            log.warning("a batch of %d failed (%s); decoding its requests one by one", len(batch), exc)
            results = [self._decode_alone(job) for job in batch]
        finished = time.perf_counter()
        for job, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                _post(job, None, result)
                continue
            _post(job, DecodeOutcome(result, (started - job.submitted) * 1000.0, (finished - started) * 1000.0,
                                     len(batch)))
            try:  # per job: a metrics or tracing fault must not touch the other jobs' results
                if self._observer is not None:
                    self._observer(job.kind, started - job.submitted, finished - started)
                self._trace(job, started, timer, len(batch))
            except Exception:
                log.exception("decode metrics/tracing failed")

    def _decode_alone(self, job: _Job) -> AsrResult | BaseException:
        assert job.request is not None  # taken jobs are never dropped
        try:
            return self.engine.decode_batch([job.request])[0]
        except Exception as exc:
            log.exception("decode failed")
            return exc

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
