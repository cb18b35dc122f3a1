"""``server.workers: 2``: two processes on one port, sessions spread over them, one ``/metrics``
that adds both up, a server-wide seat cap and readiness across them, and a SIGTERM that drains
every worker's sessions."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from pathlib import Path

import httpx

from kitt_stt.client.session import SttSession, connect
from tests.helpers import collect_until, free_port, of_type, run_server

CARS = 24  # SO_REUSEPORT hashes each connection: all 24 on one worker has odds of 2 ** -23


def _workers(pid: int) -> list[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    children = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return [child for child in children if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def _sample(metrics: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def _seated(session: SttSession, seat: str) -> None:
    await session.start(seats=[seat])
    await session.ping(seat)
    await collect_until(session, lambda frames: bool(of_type(frames, "pong")), timeout=10)


async def test_two_workers_share_a_port_and_report_together(tmp_path, model_cache) -> None:
    liveness = free_port()
    overrides = {"server": {"workers": 2, "liveness_port": liveness, "max_server_seats": CARS}}
    with run_server(tmp_path, model_cache, overrides) as server:
        assert len(_workers(server.process.pid)) == 2
        async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=5) as http:
            cars = [await stack.enter_async_context(connect(server.url)) for _ in range(CARS)]
            await asyncio.gather(*(_seated(car, f"seat{index}") for index, car in enumerate(cars)))
            await asyncio.sleep(0.6)  # a tick publishes each worker's count
            workers = (await http.get(f"http://127.0.0.1:{liveness}/livez")).json()["workers"]
            assert len(workers) == 2 and all(worker["seats"] > 0 for worker in workers), workers
            assert sum(worker["seats"] for worker in workers) == CARS
            # the cap counts both workers' seats: whichever worker answers, the server is full
            for _ in range(4):
                full = await http.get(f"{server.http}/readyz")
                assert (full.status_code, full.json()["status"]) == (503, "full")
            await asyncio.sleep(1.1)  # each worker writes its scrape-time gauges once a second
            metrics = (await http.get(f"{server.http}/metrics")).text
            assert _sample(metrics, "kitt_seats") == CARS
            assert _sample(metrics, "kitt_live_sessions") == CARS
            assert _sample(metrics, "kitt_sessions_total") >= CARS
            refused = await asyncio.gather(*(_refusal(server.url) for _ in range(6)), return_exceptions=True)
            assert all(isinstance(result, ConnectionError) and "overloaded" in str(result) for result in refused)
            # SIGTERM: every worker drains its own sessions (each car gets close 1000)
            server.process.send_signal(signal.SIGTERM)
            codes = await asyncio.gather(*(_closed(car) for car in cars))
            assert codes == [1000] * CARS
        assert await asyncio.to_thread(server.process.wait, 20) == 0


async def _refusal(url: str) -> None:
    async with connect(url):
        pass


async def _closed(session: SttSession) -> int | None:
    with contextlib.suppress(Exception):
        while True:
            await asyncio.wait_for(session.receive(), 15)
    return session.websocket.close_code
