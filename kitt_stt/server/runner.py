"""Run the app under uvicorn with a graceful drain on SIGTERM/SIGINT.

uvicorn's own shutdown closes WebSockets without letting the application speak.  Here the
first signal starts a drain: new sessions are refused (``/readyz`` 503, WebSocket close
1013), every open seat is flushed (final + commit with reason ``stop``) and closed with 1000;
only then does uvicorn exit.  A second signal exits at once.  WebSockets run on
``ws_transport``'s protocol, so a slow consumer's connection can be reset rather than kept open.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

from kitt_stt.observability.redact import redact_handlers
from kitt_stt.server.liveness import start_liveness
from kitt_stt.server.state import ServiceState
from kitt_stt.server.ws_transport import ResettableWebSocketProtocol

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServiceState, grace_s: float) -> None:
        super().__init__(config)
        self._state = state
        self._grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self._drain is not None:
            super().handle_exit(sig, frame)
            return
        log.info("signal %s: draining sessions before exit", sig)
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._drain is None:
            self._drain = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._state.drain(self._grace_s)
        finally:
            self.should_exit = True


def run(app: FastAPI, host: str, port: int, max_message_bytes: int, log_level: str,
        sockets: list[socket.socket] | None = None) -> None:
    """Serve ``app`` until a signal's drain is done. ``sockets``: a worker's own listening socket
    (server/workers.py; its supervisor serves /livez); otherwise uvicorn binds ``host:port`` and
    this process serves /livez itself when ``server.liveness_port`` is set."""
    state: ServiceState = app.state.service
    state.freeze_gc_when_ready = True
    config = uvicorn.Config(
        app, host=host, port=port, ws=ResettableWebSocketProtocol, ws_max_size=max_message_bytes,
        log_level=log_level.lower(), lifespan="on", timeout_graceful_shutdown=5,
        ws_per_message_deflate=False,  # PCM does not compress: deflate cost ~10 % of a seat-frame's CPU, both ends
    )
    redact_handlers()  # uvicorn.Config has just set up its loggers' handlers
    server = state.config.server
    if sockets is None and server.liveness_port is not None:
        start_liveness(host, server.liveness_port, state.board, server.liveness_stall_s)
    DrainingServer(config, state, server.shutdown_grace_s).run(sockets)
