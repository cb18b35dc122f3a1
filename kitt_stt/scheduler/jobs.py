"""What the scheduler queues: decode priorities, jobs, and the per-priority lanes that serve
connections in turn (:mod:`.inference` owns the queue and the worker threads)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kitt_stt.asr.engine import AsrRequest, AsrResult
from kitt_stt.observability.trace import Track


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
class Job:
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


def settle(future: asyncio.Future, value: object = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def post(job: Job, value: object = None, error: BaseException | None = None) -> None:
    """Settle ``job``'s future from a worker thread; a loop that already closed has no awaiter."""
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(settle, job.future, value, error)


class Lane:
    """Jobs of one priority: a FIFO per owner (connection), served round-robin between owners.

    Why per owner: with one FIFO, a connection that queues a hundred finals makes every other
    connection's final wait for all of them; round-robin bounds that wait to one job per owner
    ahead in the rotation. Entries that were dropped or promoted away stay in their deque and are
    skipped when reached (cheaper than searching deques on every cancellation).
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._owners: OrderedDict[Hashable, deque[Job]] = OrderedDict()

    def push(self, job: Job) -> None:
        jobs = self._owners.get(job.lane_key)
        if jobs is None:
            jobs = self._owners[job.lane_key] = deque()
        jobs.append(job)

    def pop(self) -> Job | None:
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

    def live(self) -> list[Job]:
        return [job for queue in self._owners.values() for job in queue if not job.dropped and job.rank == self.rank]

    def forget(self, lane_key: Hashable) -> None:
        self._owners.pop(lane_key, None)

    def clear(self) -> None:
        self._owners.clear()
