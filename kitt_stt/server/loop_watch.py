"""The event loop's tick: how late it wakes (``kitt_event_loop_lag_seconds``) and a heartbeat.

Every frame of every session is handled on one loop per worker; when it is saturated, a sleep of
0.25 s wakes late by as long as the frames queued ahead of it take. That lateness, the most over
the last 5 s, is the gauge: it rises before pings and finals do. The same tick publishes this
worker's row on the :class:`~kitt_stt.server.board.WorkerBoard` (heartbeat, seats, serving,
failed), which the liveness listener reads from a thread: a busy loop still ticks, late; a wedged
one stops ticking, and only that fails liveness.
"""

from __future__ import annotations

import asyncio
from collections import deque

from kitt_stt.server.state import ServiceState

TICK_S = 0.25
LAG_WINDOW_TICKS = 20  # 5 s
REFRESH_EVERY_TICKS = 4  # multiprocess gauges once a second


async def watch_loop(state: ServiceState, tick_s: float = TICK_S) -> None:
    """Run until cancelled (the app's lifespan starts and stops it)."""
    loop = asyncio.get_running_loop()
    lags: deque[float] = deque(maxlen=LAG_WINDOW_TICKS)
    ticks = 0
    while True:
        due = loop.time() + tick_s
        await asyncio.sleep(tick_s)
        lags.append(max(0.0, loop.time() - due))
        state.metrics.loop_lag.set(max(lags))
        state.publish()
        ticks += 1
        if ticks % REFRESH_EVERY_TICKS == 0:
            state.metrics.refresh()
