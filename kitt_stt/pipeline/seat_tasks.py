"""The background tasks of one seat (finals, interims): started in the seat's log context, and
cancelled together when the seat closes."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

from kitt_stt.observability.logbuffer import seat_id as seat_context


class SeatTasks:
    def __init__(self, seat: str) -> None:
        self._seat = seat
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        context = contextvars.copy_context()
        context.run(seat_context.set, self._seat)  # log records of this task name the seat
        # a task copies the context it is created in (create_task(context=) is 3.11+)
        task: asyncio.Task[None] = context.run(asyncio.create_task, coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
