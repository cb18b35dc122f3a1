"""Failures of background work, reported instead of lost.

A session's flush runs one task per seat, and a drain one per session; their exceptions used
to be gathered and never read, so a commit that failed while a session ended left no trace.
Each failure is logged once here, naming the session and the seat it cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from kitt_stt.audio.vad import EndReason

log = logging.getLogger(__name__)


class Flushable(Protocol):
    seat: str

    def flush(self, reason: EndReason) -> asyncio.Task[None] | None: ...


async def flush_all(seats: Iterable[Flushable], reason: EndReason, session_id: str) -> None:
    """Flush every seat at once and wait for all of them; log each seat whose flush failed."""
    flushing = [(seat.seat, task) for seat in list(seats) if (task := seat.flush(reason)) is not None]
    if not flushing:
        return
    results = await asyncio.gather(*(task for _, task in flushing), return_exceptions=True)
    for (seat, _), result in zip(flushing, results, strict=True):
        if isinstance(result, Exception):
            log.error("session %s seat %s: flush (%s) failed; its final or commit may be missing", session_id,
                      seat, reason.value, exc_info=result)


def log_task_failure(task: asyncio.Task[None], what: str) -> None:
    """Done-callback: log ``task``'s exception, if it ended with one (a cancellation is not a failure)."""
    if task.cancelled():
        return
    failure = task.exception()
    if failure is not None:
        log.error("%s failed", what, exc_info=failure)
