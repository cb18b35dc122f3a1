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
import logging
import threading
import time
from collections import Counter
from collections.abc import Hashable

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer
from kitt_stt.observability.trace import Tracer
from kitt_stt.scheduler.jobs import DecodeObserver, DecodeOutcome, Job, Lane, Priority, TraceTag, post, settle

log = logging.getLogger(__name__)


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
        self._lanes = [Lane(0)] if fifo else [Lane(int(priority)) for priority in Priority]
        self._depth = 0
        self._pending_interims: dict[Hashable, Job] = {}
        self._queued_chunks: dict[asyncio.Future, Job] = {}
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
                post(job, None, error)
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
        job = Job(rank, request, owner, lane_key, coalesce_key, future, loop, time.perf_counter(), trace,
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

    def _drop(self, job: Job, settle_now: bool = False) -> None:
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
            settle(job.future, None)
        else:
            post(job)

    def _next_job(self) -> Job | None:
        """The next live job of the most urgent lane. Call with the lock held."""
        for lane in self._lanes:
            while (job := lane.pop()) is not None:
                if not self._stale(job):
                    return job
        return None

    def _take_batch(self) -> list[Job] | None:
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

    def _taken(self, job: Job) -> None:
        self._depth -= 1
        self._queued_chunks.pop(job.future, None)
        if job.coalesce_key is not None and self._pending_interims.get(job.coalesce_key) is job:
            del self._pending_interims[job.coalesce_key]

    def _stale(self, job: Job) -> bool:
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
        batch: list[Job] | None = None
        try:
            while (batch := self._take_batch()) is not None:
                try:
                    self._run(batch)
                except Exception as exc:  # e.g. an engine answering with the wrong number of results
                    log.exception("decode failed for a batch of %d", len(batch))
                    for job in batch:
                        post(job, None, exc)
        except BaseException as exc:  # whatever it was: say so, and answer every awaiter
            failure = f"{threading.current_thread().name} died: {exc!r}"
            log.critical("inference worker stopped: %s; the service reports unhealthy", failure, exc_info=True)
            error = RuntimeError(f"the inference service has failed: {failure}")
            for job in batch or ():
                post(job, None, error)
            with self._cond:  # queued and future decodes fail at once rather than wait for nobody
                self.failure = failure
                self._fail_queued(error)
                self._cond.notify_all()

    def _run(self, batch: list[Job]) -> None:
        started = time.perf_counter()
        timer = StageTimer()
        requests = [job.request for job in batch if job.request is not None]
        try:
            results: list[AsrResult | BaseException] = list(self.engine.decode_batch(requests, timer))
        except Exception as exc:
            if len(batch) == 1:
                log.exception("decode failed")
                post(batch[0], None, exc)
                return
            # one bad request must not fail the others: decode each alone to find it
            log.warning("a batch of %d failed (%s); decoding its requests one by one", len(batch), exc)
            results = [self._decode_alone(job) for job in batch]
        finished = time.perf_counter()
        for job, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                post(job, None, result)
                continue
            post(job, DecodeOutcome(result, (started - job.submitted) * 1000.0, (finished - started) * 1000.0,
                                     len(batch)))
            try:  # per job: a metrics or tracing fault must not touch the other jobs' results
                if self._observer is not None:
                    self._observer(job.kind, started - job.submitted, finished - started)
                self._trace(job, started, timer, len(batch))
            except Exception:
                log.exception("decode metrics/tracing failed")

    def _decode_alone(self, job: Job) -> AsrResult | BaseException:
        assert job.request is not None  # taken jobs are never dropped
        try:
            return self.engine.decode_batch([job.request])[0]
        except Exception as exc:
            log.exception("decode failed")
            return exc

    def _trace(self, job: Job, started: float, timer: StageTimer, batch_size: int) -> None:
        tracer = self._tracer
        if tracer is None or job.trace is None or not tracer.enabled:
            return
        kind = job.kind.name.lower()
        args = {**job.trace.args, "kind": kind, "batch": batch_size}
        tracer.add("scheduler.queue_wait", "scheduler", tracer.to_us(job.submitted),
                   int((started - job.submitted) * 1e6), job.trace.track, args)
        for stage, begin, end in timer.stages:
            tracer.add(f"asr.{stage}", "asr", tracer.to_us(begin), int((end - begin) * 1e6), job.trace.track, args)
