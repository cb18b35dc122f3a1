"""The FastAPI application: the WebSocket endpoint, ``/healthz``, ``/readyz`` (and ``/console/``, docs/console.md).

The model is validated before the app is built (so a broken model fails start-up with a clear
message). Building the engine (minutes for a TensorRT engine on an Orin) and the warm-up run in
a thread after start-up: ``/healthz`` answers from the start, so probes never kill a pod that is
building, and ``/readyz`` answers 503 until both are done (``status: loading``, then ``ready``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from kitt_stt import __version__
from kitt_stt.asr.engine import AsrEngine
from kitt_stt.asr.factory import EnginePlan, PendingEngine
from kitt_stt.audio.silero_batch import build_vad_batch
from kitt_stt.config.schema import AppConfig
from kitt_stt.console.routes import mount_console
from kitt_stt.observability.logbuffer import RecentLogBuffer
from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer, TraceWriter
from kitt_stt.protocol.codec import encode_server_frame
from kitt_stt.protocol.errors import ErrorCode
from kitt_stt.protocol.frames import ErrorFrame
from kitt_stt.scheduler import InferenceScheduler, Priority
from kitt_stt.server.api_docs import mount_api_docs
from kitt_stt.server.auth import authorisation_failure, bearer_refusal, debug_refusal
from kitt_stt.server.connection import CLOSE_TRY_AGAIN_LATER, Connection
from kitt_stt.server.loop_watch import watch_loop
from kitt_stt.server.openai_errors import install_error_handlers
from kitt_stt.server.openai_routes import openai_router
from kitt_stt.server.state import ServiceState
from kitt_stt.text.offload import shared_worker
from kitt_stt.turn.text_model import TurnTextModel
from kitt_stt.turnsense.runner import TurnModelRunner

log = logging.getLogger(__name__)


def create_app(config: AppConfig, engine: AsrEngine | EnginePlan, turn_model: TurnModelRunner | None = None,
               log_buffer: RecentLogBuffer | None = None, load_seconds: float = 0.0,
               text_model: TurnTextModel | None = None) -> FastAPI:
    metrics = Metrics()
    tracing = config.tracing
    tracer = Tracer(tracing.max_events, tracing.max_bytes) if tracing.enabled or config.debug.trace_enabled else None
    writer = TraceWriter(tracer, tracing.path, tracing.flush_interval_s, tracing.keep_files) \
        if tracer is not None and tracing.enabled else None

    def observe_decode(priority: Priority, queue_s: float, decode_s: float) -> None:
        kind = priority.name.lower()
        metrics.queue_wait.labels(kind).observe(queue_s)
        metrics.decode.labels(kind).observe(decode_s)

    plan = engine if isinstance(engine, EnginePlan) else None
    if isinstance(engine, EnginePlan):
        engine = PendingEngine(engine.info)
    scheduler = InferenceScheduler(engine, workers=config.asr.workers, max_batch=config.asr.max_batch,
                                   tracer=tracer, observer=observe_decode, fifo=config.asr.naive,
                                   interim_budget_ms=config.asr.interim_queue_budget_ms or None)
    vad_batch = build_vad_batch(config.vad)
    state = ServiceState(config=config, engine=engine, scheduler=scheduler, turn_model=turn_model,
                         text_model=text_model, vad_batch=vad_batch, metrics=metrics, tracer=tracer,
                         log_buffer=log_buffer)
    metrics.model_load.set(load_seconds)
    metrics.bind(
        queue_depth=lambda: scheduler.queue_depth,
        buffered_bytes=lambda: state.buffered_bytes,
        connections=lambda: len(state.connections),
        seats=lambda: state.seat_count,
        trace_events=lambda: tracer.size[0] if tracer is not None else 0,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        if vad_batch is not None:
            vad_batch.start()
        if writer is not None:
            writer.start()
        warm = asyncio.create_task(_load_and_warm_up(state, plan, load_seconds))
        watch = asyncio.create_task(watch_loop(state))
        try:
            yield
        finally:
            await state.drain(config.server.shutdown_grace_s)
            warm.cancel()
            watch.cancel()
            await asyncio.to_thread(scheduler.stop, 2.0)  # off the loop, one deadline for all workers
            await asyncio.to_thread(shared_worker().close)  # the drained finals needed it; nothing does now
            if turn_model is not None:
                turn_model.close()
            if vad_batch is not None:
                await asyncio.to_thread(vad_batch.stop, 2.0)
            if writer is not None:
                writer.stop()
                await asyncio.to_thread(writer.write_now)

    # FastAPI's own /docs, /redoc and /openapi.json would be open whatever server.auth_token says
    app = FastAPI(title="kitt-stt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service = state
    if config.server.api_docs:
        mount_api_docs(app, config.server)
    if config.server.console:
        mount_console(app, config)
    app.include_router(openai_router(state))  # /v1/audio/transcriptions, /v1/models (docs/integrations.md)
    install_error_handlers(app)  # FastAPI's 404/405/422 under /v1 in OpenAI's error shape

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        # liveness: a process whose decode workers died cannot recover; let the orchestrator restart it
        failure = state.failure
        if failure is not None:
            return JSONResponse({"status": "failed", "error": failure}, status_code=503)
        return JSONResponse({"status": "alive"})

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        # 503 `full` at server.max_server_seats: sessions stay on the pod that took them, so new cars must
        # go to another pod rather than be refused here; with workers, ready once every worker serves
        failure = state.failure
        ready = state.serving and not state.seats_full and (state.board.workers == 1 or state.board.all_serving())
        body = {
            "status": "ready" if ready else ("draining" if state.draining else "failed" if failure else
                                             "full" if state.serving and state.seats_full else "loading"),
            "model": {"name": state.engine.info.name, "kind": state.engine.info.kind,
                      "provider": state.engine.info.provider},
            "turn_model": None if turn_model is None else {"provider": turn_model.model.provider.value},
            "warm_up_ms": round(state.warm_up_ms, 1),
        }
        if failure:
            body["error"] = failure
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        if config.server.metrics_auth:
            refusal = bearer_refusal(request.headers.get("authorization", ""), config.server.auth_token or "")
            if refusal is not None:
                return refusal
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug/logs")
    async def debug_logs(request: Request) -> Response:
        refusal = debug_refusal(request, config.debug.logs_enabled and log_buffer is not None, config.debug.token)
        if refusal is not None or log_buffer is None:
            return refusal or PlainTextResponse("not found", status_code=404)
        return PlainTextResponse("\n".join(log_buffer.lines()) + "\n", media_type="application/x-ndjson")

    @app.get("/debug/trace")
    async def debug_trace(request: Request) -> Response:
        refusal = debug_refusal(request, config.debug.trace_enabled and tracer is not None, config.debug.token)
        if refusal is not None or tracer is None:
            return refusal or PlainTextResponse("not found", status_code=404)
        body = await asyncio.to_thread(tracer.render_snapshot)
        return Response(body, media_type="application/json")

    @app.post("/debug/tracing")
    async def debug_tracing(request: Request) -> Response:
        """Pause or resume span recording (same token as /debug/trace), e.g. for on/off A/B runs.

        ``?enabled=`` is read after the token check: a request without the token learns nothing
        about the endpoint's parameters (FastAPI's validation would answer 422 first)."""
        refusal = debug_refusal(request, config.debug.trace_enabled and tracer is not None, config.debug.token)
        if refusal is not None or tracer is None:
            return refusal or PlainTextResponse("not found", status_code=404)
        enabled = _query_bool(request.query_params.get("enabled"))
        if enabled is None:
            return PlainTextResponse("enabled=true or enabled=false is required", status_code=422)
        tracer.enabled = enabled
        return JSONResponse({"enabled": tracer.enabled})

    @app.websocket(config.server.path)
    async def stt(websocket: WebSocket) -> None:
        refusal = authorisation_failure(websocket, config.server.auth_token)
        if refusal is not None:
            await websocket.send_denial_response(refusal)
            return
        await websocket.accept()
        address = websocket.client.host if websocket.client else "unknown"
        refused = _cannot_accept(state, address)
        if refused is not None:
            kind, reason = refused
            metrics.refused_total.labels(kind).inc()
            frame = ErrorFrame(code=ErrorCode.OVERLOADED.value, message=reason, fatal=True)
            await websocket.send_bytes(encode_server_frame(frame))
            await websocket.close(CLOSE_TRY_AGAIN_LATER)
            return
        connection = Connection(websocket, state)
        state.connections.add(connection)
        state.connections_per_ip[address] += 1
        try:
            await connection.serve()
        finally:
            state.connections.discard(connection)
            state.connections_per_ip[address] -= 1
            if state.connections_per_ip[address] <= 0:
                del state.connections_per_ip[address]

    return app


async def _in_daemon_thread(build: Callable[[], AsrEngine]) -> AsrEngine:
    """Run ``build`` on a daemon thread: a TensorRT build cannot be interrupted, and on the default
    executor the interpreter's exit would wait for it, past the pod's grace period, when SIGTERM
    arrives mid-build (the pod is unready then: no session is lost by not waiting)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[AsrEngine] = loop.create_future()

    def run() -> None:
        try:
            engine = build()
        except BaseException as exc:
            settle: Callable[[], None] = partial(_settle_failed, done, exc)
        else:
            settle = partial(_settle_built, done, engine)
        with contextlib.suppress(RuntimeError):  # the loop closed first: the process is exiting
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=run, name="engine-build", daemon=True).start()
    return await done


def _settle_built(future: asyncio.Future[AsrEngine], engine: AsrEngine) -> None:
    if not future.done():
        future.set_result(engine)


def _settle_failed(future: asyncio.Future[AsrEngine], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


async def _load_and_warm_up(state: ServiceState, plan: EnginePlan | None, load_seconds: float) -> None:
    stage = "engine build"
    started = time.perf_counter()
    try:
        if plan is not None:
            engine = await _in_daemon_thread(plan.build)
            state.engine = state.scheduler.engine = engine
            built_s = time.perf_counter() - started
            state.metrics.model_load.set(load_seconds + built_s)
            log.info("engine %s built in %.1f s", engine.info.name, built_s)
        stage = "warm-up"
        await asyncio.to_thread(state.warm_up)
    except Exception as exc:
        state.load_error = f"{stage} failed: {exc}"
        log.exception("the ASR engine could not be made ready (%s); /healthz and /readyz report failed", stage)
        return
    # Everything loaded so far lives as long as the process: out of the collector's sight, a full
    # collection walks only what sessions allocate (it walked it all, holding the GIL for ~0.1 s
    # each time a hotword flood triggered one; utils/performance/hotword_flood_bench.py).
    if state.freeze_gc_when_ready:  # the served process only (runner.run): not a test's
        await asyncio.to_thread(gc.collect)
        gc.freeze()
    state.ready = not state.draining


def _query_bool(value: str | None) -> bool | None:
    """A boolean query parameter as FastAPI reads one (true/false, 1/0, yes/no, on/off), else None."""
    if value is None:
        return None
    return {"true": True, "1": True, "yes": True, "on": True,
            "false": False, "0": False, "no": False, "off": False}.get(value.lower())


def _cannot_accept(state: ServiceState, address: str) -> tuple[str, str] | None:
    """Why a new session is refused, as (metric label, message for the client), or None."""
    server = state.config.server
    if state.draining:
        return "draining", "server is shutting down; reconnect to another instance"
    if state.failure is not None:
        return "failed", "server cannot serve (an inference worker failed); reconnect to another instance"
    if not state.ready:
        return "not_ready", "server is still loading its model; retry shortly"
    if len(state.connections) >= server.max_connections:
        return "full", f"server is at its limit of {server.max_connections} sessions"
    if state.seats_full:
        return "seats", f"server is at its limit of {server.max_server_seats} seats (server.max_server_seats)"
    per_ip = server.max_connections_per_client_ip
    if per_ip is not None and state.connections_per_ip[address] >= per_ip:
        return "per_address", f"this address already has {per_ip} sessions (server.max_connections_per_client_ip)"
    return None
