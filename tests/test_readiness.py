"""/readyz and /healthz follow what the service can really do: a dead inference worker makes
both 503 (the pod is restarted) and new sessions are refused."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
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
