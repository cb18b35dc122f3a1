"""Scheduler behaviour with a fake engine whose decode time we control."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
from kitt_stt.scheduler import InferenceScheduler, Priority
from tests.helpers import running

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


class GatedEngine(AsrEngine):
    """Records the order of decodes; each batch waits until the test opens the gate."""

    def __init__(self) -> None:
        self.info = EngineInfo(name="fake", kind="fake", provider="cpu")
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()

    def decode_batch(self, requests: Sequence[AsrRequest], timer=None) -> list[AsrResult]:
        self.entered.set()
        self.gate.wait(timeout=10)
        labels = [request.options.language for request in requests]
        self.batches.append(labels)
        return [AsrResult(text=label) for label in labels]


def request(label: str) -> AsrRequest:
    from kitt_stt.asr.engine import DecodeOptions

    return AsrRequest(np.zeros(160, np.int16), DecodeOptions(language=label))


async def block_worker(scheduler: InferenceScheduler, engine: GatedEngine) -> asyncio.Future:
    """Occupy the single worker so later submissions queue up."""
    blocker = scheduler.submit(request("blocker"), Priority.INTERIM, owner="x")
    await asyncio.to_thread(engine.entered.wait, 5)
    return blocker


async def test_final_behind_fifty_interims_runs_next() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        interims = [scheduler.submit(request(f"i{n}"), Priority.INTERIM, owner="c", coalesce_key=("c", n))
                    for n in range(50)]
        final = scheduler.submit(request("final"), Priority.FINAL, owner="c")
        engine.gate.set()
        await asyncio.gather(blocker, final, *interims)
        assert engine.batches[0] == ["blocker"]
        assert engine.batches[1] == ["final"]
        assert len(engine.batches) == 52


async def test_newer_interim_of_a_seat_replaces_the_pending_one() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        old = scheduler.submit(request("old"), Priority.INTERIM, owner="c", coalesce_key=("c", "driver"))
        other_seat = scheduler.submit(request("other"), Priority.INTERIM, owner="c", coalesce_key=("c", "rear"))
        new = scheduler.submit(request("new"), Priority.INTERIM, owner="c", coalesce_key=("c", "driver"))
        assert await old is None  # superseded without running
        engine.gate.set()
        await asyncio.gather(blocker, other_seat, new)
        assert (await new).result.text == "new"
        assert ["old"] not in engine.batches
        assert sorted(b[0] for b in engine.batches[1:]) == ["new", "other"]


async def test_batches_same_priority_only() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=4)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        finals = [scheduler.submit(request(f"f{n}"), Priority.FINAL, owner="c") for n in range(6)]
        interim = scheduler.submit(request("i"), Priority.INTERIM, owner="c", coalesce_key="k")
        engine.gate.set()
        outcomes = await asyncio.gather(*finals, interim, blocker)
        assert engine.batches[1:] == [["f0", "f1", "f2", "f3"], ["f4", "f5"], ["i"]]
        assert outcomes[0].batch_size == 4 and outcomes[0].queue_ms >= 0


async def test_cancel_owner_drops_only_that_connections_jobs() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        gone = [scheduler.submit(request("gone"), Priority.FINAL, owner="closed") for _ in range(3)]
        kept = scheduler.submit(request("kept"), Priority.FINAL, owner="open")
        assert scheduler.cancel_owner("closed") == 3
        assert scheduler.queue_depth == 1
        engine.gate.set()
        assert await asyncio.gather(*gone) == [None, None, None]
        assert (await kept).result.text == "kept"
        await blocker
        assert ["gone"] not in engine.batches


async def test_engine_failure_reaches_the_awaiter_and_worker_survives() -> None:
    class Flaky(GatedEngine):
        def decode_batch(self, requests, timer=None):
            if requests[0].options.language == "boom":
                raise RuntimeError("engine exploded")
            return super().decode_batch(requests, timer)

    engine = Flaky()
    engine.gate.set()
    with running(InferenceScheduler(engine, workers=1)) as scheduler:
        with pytest.raises(RuntimeError, match="exploded"):
            await scheduler.submit(request("boom"), Priority.FINAL, owner="c")
        assert (await scheduler.submit(request("fine"), Priority.FINAL, owner="c")).result.text == "fine"


async def test_connections_take_turns_within_a_priority() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        flood = [scheduler.submit(request(f"flood{n}"), Priority.FINAL, owner="flooder") for n in range(20)]
        victim = scheduler.submit(request("victim"), Priority.FINAL, owner="victim")
        engine.gate.set()
        await asyncio.gather(blocker, victim, *flood)
        order = [batch[0] for batch in engine.batches]
        assert order.index("victim") <= 2  # the blocker, at most one flood decode, then the victim


async def test_closed_segments_chunks_are_promoted_past_other_finals() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        chunk = scheduler.submit(request("chunk"), Priority.CHUNK, owner="a")
        others = [scheduler.submit(request(f"other{n}"), Priority.FINAL, owner="b") for n in range(5)]
        assert scheduler.promote([chunk]) == 1
        engine.gate.set()
        await asyncio.gather(blocker, chunk, *others)
        order = [batch[0] for batch in engine.batches]
        assert order.index("chunk") <= 2, order  # round-robin with b's finals, not after all of them


async def test_outstanding_counts_until_answered() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=1)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        jobs = [scheduler.submit(request(f"j{n}"), Priority.FINAL, owner="c") for n in range(3)]
        assert scheduler.outstanding("c") == 3 and scheduler.queue_depth == 3
        engine.gate.set()
        await asyncio.gather(blocker, *jobs)
        await asyncio.sleep(0)
        assert scheduler.outstanding("c") == 0 and scheduler.queue_depth == 0


async def test_a_failing_request_is_retried_alone_and_its_batch_mates_succeed() -> None:
    class PoisonAware(GatedEngine):
        def decode_batch(self, requests, timer=None):
            if any(r.options.language == "poison" for r in requests):
                if len(requests) > 1:
                    raise RuntimeError("batch contains poison")
                raise ValueError("poison")
            return super().decode_batch(requests, timer)

    engine = PoisonAware()
    with running(InferenceScheduler(engine, workers=1, max_batch=4)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        good = [scheduler.submit(request(f"g{n}"), Priority.FINAL, owner=f"c{n}") for n in range(2)]
        bad = scheduler.submit(request("poison"), Priority.FINAL, owner="c9")
        engine.gate.set()
        await blocker
        assert [(await g).result.text for g in good] == ["g0", "g1"]
        with pytest.raises(ValueError, match="poison"):
            await bad


async def test_a_metrics_fault_after_decoding_touches_no_result_and_the_worker_goes_on() -> None:
    calls = []

    def observer(priority, queue_s, decode_s) -> None:
        calls.append(priority)
        if len(calls) == 1:
            raise RuntimeError("observer broke")

    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, max_batch=4, observer=observer)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        batch = [scheduler.submit(request(f"b{n}"), Priority.FINAL, owner="c") for n in range(3)]
        engine.gate.set()
        await blocker
        assert [(await job).result.text for job in batch] == ["b0", "b1", "b2"]  # the first fault hid nothing
        assert (await scheduler.submit(request("later"), Priority.FINAL, owner="c")).result.text == "later"
        assert scheduler.failure is None


async def test_a_dead_worker_fails_every_decode_instead_of_hanging() -> None:
    class Fatal(GatedEngine):
        def decode_batch(self, requests, timer=None):
            if requests[0].options.language == "fatal":
                raise SystemExit("worker killed")  # not an Exception: escapes every handler
            return super().decode_batch(requests, timer)

    engine = Fatal()
    scheduler = InferenceScheduler(engine, workers=1)
    with running(scheduler):
        blocker = await block_worker(scheduler, engine)
        doomed = scheduler.submit(request("fatal"), Priority.FINAL, owner="c")
        queued = scheduler.submit(request("queued"), Priority.FINAL, owner="c")
        engine.gate.set()
        await blocker
        for future in (doomed, queued):
            with pytest.raises(RuntimeError, match="worker killed"):
                await asyncio.wait_for(future, 5)
        assert scheduler.failure is not None and "worker killed" in scheduler.failure
        assert scheduler.queue_depth == 0
        with pytest.raises(RuntimeError, match="has failed"):
            await scheduler.submit(request("after"), Priority.FINAL, owner="c")


async def test_naive_fifo_mode_still_cancels_a_closed_connections_jobs() -> None:
    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, fifo=True)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        gone = [scheduler.submit(request("gone"), Priority.FINAL, owner="closed") for _ in range(3)]
        kept = scheduler.submit(request("kept"), Priority.INTERIM, owner="open")
        assert scheduler.cancel_owner("closed") == 3 and scheduler.queue_depth == 1
        engine.gate.set()
        assert await asyncio.gather(*gone) == [None, None, None]
        assert (await kept).result.text == "kept"
        await blocker
