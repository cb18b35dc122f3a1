"""/readyz and /healthz follow what the service can really do: a dead inference worker makes
both 503 (the pod is restarted) and new sessions are refused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import httpx

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
from kitt_stt.asr.factory import EnginePlan
from kitt_stt.config.schema import AppConfig
from kitt_stt.server.app import _cannot_accept, create_app


class SilentEngine(AsrEngine):
    info = EngineInfo(name="fake", kind="fake", provider="cpu")

    def decode_batch(self, requests: Sequence[AsrRequest], timer=None) -> list[AsrResult]:
        return [AsrResult(text="") for _ in requests]


async def test_a_dead_worker_makes_the_service_unready() -> None:
    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), SilentEngine())
    state = app.state.service
    state.ready = True
    # ASGITransport runs no lifespan: nothing else changes readiness under the test
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kitt") as client:
        assert (await client.get("/readyz")).status_code == 200
        state.scheduler.failure = "asr-worker-0 died: MemoryError()"
        answer = await client.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["status"] == "failed" and "MemoryError" in answer.json()["error"]
        alive = await client.get("/healthz")
        assert alive.status_code == 503 and "MemoryError" in alive.json()["error"]
    refused = _cannot_accept(state, "10.0.0.7")
    assert refused is not None and refused[0] == "failed" and "worker failed" in refused[1]


async def test_healthz_answers_while_the_engine_builds_and_readyz_after() -> None:
    gate = threading.Event()

    def slow_build() -> AsrEngine:  # a TensorRT engine build, say
        gate.wait(10)
        return SilentEngine()

    plan = EnginePlan(SilentEngine.info, slow_build)
    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), plan)
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kitt") as client:
        assert (await client.get("/healthz")).status_code == 200  # liveness from the start
        loading = await client.get("/readyz")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        gate.set()
        for _ in range(100):
            if (await client.get("/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert (await client.get("/readyz")).json()["status"] == "ready"
        state = app.state.service
        assert isinstance(state.engine, SilentEngine) and state.scheduler.engine is state.engine


async def test_a_failed_engine_build_makes_the_pod_unhealthy() -> None:
    def broken_build() -> AsrEngine:
        raise RuntimeError("TensorRT ran out of workspace")

    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), EnginePlan(SilentEngine.info, broken_build))
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kitt") as client:
        for _ in range(100):
            if (await client.get("/healthz")).status_code == 503:
                break
            await asyncio.sleep(0.05)
        health = await client.get("/healthz")
        assert health.status_code == 503 and "engine build failed: TensorRT ran out" in health.json()["error"]
        assert (await client.get("/readyz")).json()["status"] == "failed"
