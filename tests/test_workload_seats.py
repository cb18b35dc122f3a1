"""Seat sweeps larger than one connection may hold (docs/capacity.md): spread over connections.

A server refuses more than ``server.max_seats`` seats on one connection (``too_many_seats``), so
``--seats 32`` against the latency servers (max_seats 16) used to fail at once. The harness now
spreads a seat count over as few connections as the cap allows; the sweep is run here through
the same function latency_report.py uses, on the CPU and the tone model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers import run_server
from utils.performance.workload import run_plan, split_seats


def test_split_seats_uses_as_few_connections_as_the_cap_allows() -> None:
    assert split_seats(8, 16) == [8]
    assert split_seats(16, 16) == [16]
    assert split_seats(32, 16) == [16, 16]
    assert split_seats(20, 16) == [10, 10]
    assert split_seats(17, 16) == [9, 8]
    assert split_seats(33, 16) == [11, 11, 11]
    for total in range(1, 70):
        plan = split_seats(total, 16)
        assert sum(plan) == total and max(plan) <= 16 and max(plan) - min(plan) <= 1
    with pytest.raises(ValueError):
        split_seats(0, 16)


def test_a_sweep_past_one_connections_cap_runs_every_seat(tmp_path: Path, model_cache: Path) -> None:
    """`latency_report.py --seats N` (and the GPU acceptance arms) measure through run_plan: with N
    above the server's max_seats every seat still speaks and gets its final (before: too_many_seats)."""
    seats = 16 + 4
    with run_server(tmp_path, model_cache, {"server": {"max_seats": 16}}) as server:
        rows = asyncio.run(run_plan(server.url, split_seats(seats, 16), [1.0], 1, 0, None, None, 0, progress=False))
    assert len(rows) == seats
    assert all(row.finals == 1 and row.client_final_latency_ms is not None for row in rows), rows
