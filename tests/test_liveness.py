"""Liveness off the event loop: a busy loop (late ticks) stays alive, a wedged one (no tick for
``server.liveness_stall_s``) fails ``/livez``, and ``kitt_event_loop_lag_seconds`` shows how late."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from kitt_stt.config.schema import AppConfig
from kitt_stt.server.app import create_app
from kitt_stt.server.liveness import start_liveness
from kitt_stt.server.loop_watch import watch_loop
from tests.helpers import free_port
from tests.test_readiness import SilentEngine


async def _livez(port: int) -> httpx.Response:
    """Asked from a thread: the loop under test is the one being blocked."""
    return await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/livez", timeout=1.0)


def _livez_during(port: int, delay_s: float, block_s: float) -> tuple[httpx.Response, float]:
    """Block the calling loop for ``block_s`` while a thread asks /livez ``delay_s`` into it; the
    answer, and how long before the block's end it arrived (> 0: answered while the loop was blocked)."""
    answered: list[tuple[httpx.Response, float]] = []

    def ask() -> None:
        time.sleep(delay_s)
        response = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1.0)
        answered.append((response, time.monotonic()))

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(block_s)
    ended = time.monotonic()
    thread.join(5)
    response, at = answered[0]
    return response, ended - at


async def test_a_busy_loop_stays_alive_and_a_wedged_one_fails() -> None:
    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), SilentEngine())
    state = app.state.service
    port = free_port()
    listener = start_liveness("127.0.0.1", port, state.board, stall_s=0.8)
    watch = asyncio.create_task(watch_loop(state, tick_s=0.05))
    try:
        await asyncio.sleep(0.15)
        assert (await _livez(port)).json()["status"] == "alive"
        # busy: the loop blocked 0.6 s at a time, under the stall limit; /livez answers during the block
        for _ in range(2):
            busy, early_s = _livez_during(port, delay_s=0.45, block_s=0.6)
            assert busy.status_code == 200 and early_s > 0, (busy.text, early_s)
            await asyncio.sleep(0.06)
        lag = float(app.state.service.metrics.loop_lag._value.get())
        assert lag >= 0.5, lag
        # wedged: no tick for longer than the limit
        stalled, early_s = _livez_during(port, delay_s=1.0, block_s=1.3)
        assert stalled.status_code == 503 and stalled.json()["status"] == "stalled" and early_s > 0, stalled.text
        await asyncio.sleep(0.15)  # ticking again: alive again
        assert (await _livez(port)).status_code == 200
        state.scheduler.failure = "asr-worker-0 died: MemoryError()"
        await asyncio.sleep(0.15)
        failed = await _livez(port)
        assert failed.status_code == 503 and failed.json()["status"] == "failed"
        assert (await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/other", timeout=1.0)).status_code == 404
    finally:
        watch.cancel()
        listener.shutdown()
