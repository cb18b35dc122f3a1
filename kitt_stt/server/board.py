"""What each worker process publishes for the others and for the liveness listener: a heartbeat,
its live seats, whether it serves and whether it failed (``server.workers``, docs/configuration.md).

One row of floats per worker in shared memory (a spawn context's ``RawArray``), or in a plain list
for a single process. Each worker writes only its own row, so no lock is needed; a reader may see
a row a tick old. ``time.monotonic`` is one clock for every process of the machine on Linux, so a
heartbeat written by a worker can be aged by another process.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import MutableSequence
from dataclasses import dataclass

_HEARTBEAT, _SEATS, _SERVING, _FAILED = range(4)
_FIELDS = 4


@dataclass(frozen=True)
class WorkerView:
    """One worker's row as read now."""

    index: int
    seats: int
    serving: bool
    failed: bool
    heartbeat_age_s: float | None  # None: its event loop has not ticked yet (still loading)


class WorkerBoard:
    def __init__(self, workers: int, cells: MutableSequence[float] | None = None) -> None:
        self.workers = workers
        self._cells: MutableSequence[float] = cells if cells is not None else [0.0] * (workers * _FIELDS)

    @classmethod
    def shared(cls, workers: int) -> WorkerBoard:
        """A board in shared memory, to hand to spawned worker processes."""
        return cls(workers, multiprocessing.get_context("spawn").RawArray("d", workers * _FIELDS))

    def publish(self, index: int, *, seats: int, serving: bool, failed: bool) -> None:
        """Worker ``index``'s state, and a heartbeat: its event loop is making progress."""
        row = index * _FIELDS
        self._cells[row + _SEATS] = float(seats)
        self._cells[row + _SERVING] = 1.0 if serving else 0.0
        self._cells[row + _FAILED] = 1.0 if failed else 0.0
        self._cells[row + _HEARTBEAT] = time.monotonic()

    def set_seats(self, index: int, seats: int) -> None:
        """A seat opened or closed: the count the other workers' admission reads, at once."""
        self._cells[index * _FIELDS + _SEATS] = float(seats)

    def total_seats(self) -> int:
        return int(sum(self._cells[index * _FIELDS + _SEATS] for index in range(self.workers)))

    def all_serving(self) -> bool:
        return all(self._cells[index * _FIELDS + _SERVING] for index in range(self.workers))

    def view(self) -> list[WorkerView]:
        now = time.monotonic()
        rows = []
        for index in range(self.workers):
            row = index * _FIELDS
            beat = self._cells[row + _HEARTBEAT]
            rows.append(WorkerView(index, int(self._cells[row + _SEATS]), bool(self._cells[row + _SERVING]),
                                   bool(self._cells[row + _FAILED]), now - beat if beat else None))
        return rows
