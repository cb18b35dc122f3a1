"""What a connection may add to the decode queue (kitt_stt/pipeline/admission.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.admission import Admission
from kitt_stt.protocol.errors import ErrorCode

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


@dataclass
class FakeQueue:
    """The two numbers admission reads from the scheduler."""

    pending: int = 0
    queue_depth: int = 0

    def outstanding(self, owner: object) -> int:
        return self.pending


def admission(queue: FakeQueue, **server: object) -> Admission:
    config = AppConfig.model_validate({"server": server, "asr": {"max_queue": 10}})
    return Admission(config, queue, owner="conn")  # type: ignore[arg-type]


def test_segment_starts_are_budgeted_per_seat() -> None:
    gate = admission(FakeQueue(), segment_starts={"per_s": 0.001, "burst": 3})
    assert [gate.open_segment("a") for _ in range(3)] == [None, None, None]
    refusal = gate.open_segment("a")
    assert refusal is not None and refusal.code is ErrorCode.RATE_LIMITED and refusal.seat == "a"
    assert gate.open_segment("b") is None  # another seat has its own budget


def test_a_connection_with_too_many_outstanding_decodes_opens_nothing() -> None:
    queue = FakeQueue(pending=4)
    gate = admission(queue, max_pending_decodes=4)
    refusal = gate.open_segment("a")
    assert refusal is not None and refusal.code is ErrorCode.OVERLOADED and "outstanding" in refusal.message
    assert not gate.optional_decode()
    queue.pending = 3
    assert gate.open_segment("a") is None and gate.optional_decode()


def test_a_full_queue_refuses_every_connection() -> None:
    queue = FakeQueue(queue_depth=10)
    gate = admission(queue)
    refusal = gate.open_segment("a")
    assert refusal is not None and refusal.code is ErrorCode.OVERLOADED and "queue is full" in refusal.message
    assert not gate.optional_decode()


def test_the_message_pacer_lets_a_second_through_then_paces() -> None:
    from kitt_stt.pipeline.rate_limit import MessagePacer

    pacer = MessagePacer(100)
    assert all(pacer.delay_for(1.0) == 0.0 for _ in range(100))  # one second's worth at once
    waits = [pacer.delay_for(1.0) for _ in range(50)]
    assert waits == sorted(waits) and 0.45 <= waits[-1] <= 0.51  # the 50th beyond it waits ~0.5 s
