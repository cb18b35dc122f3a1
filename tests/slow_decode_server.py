"""``python -m tests.slow_decode_server serve ...``: the real ``kitt-stt serve``, with every decode
batch of its engine ``DECODE_DELAY_S`` slower, as on a loaded accelerator. For tests that need a
decode to be in flight while the seat moves on (tests/test_interims_exact.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from kitt_stt.asr import factory
from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer

DECODE_DELAY_S = 0.15

_build = factory.EnginePlan.build


def _slow_build(plan: factory.EnginePlan) -> AsrEngine:
    engine = _build(plan)
    decode_batch = engine.decode_batch

    def slow_decode_batch(requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        time.sleep(DECODE_DELAY_S)
        return decode_batch(requests, timer)

    engine.decode_batch = slow_decode_batch  # type: ignore[method-assign]
    return engine


if __name__ == "__main__":
    factory.EnginePlan.build = _slow_build  # type: ignore[method-assign]
    from kitt_stt.cli import main

    sys.exit(main())
