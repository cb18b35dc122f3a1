"""Run acceptance steps in order, stop at the first one that fails, and say where it stopped.

A GPU check that half-runs is worse than one that stops: later steps would measure the CPU
fallback and print plausible numbers. So the first failure ends the run, its message names what
was missing, and the exit status says whether it was the host (no GPU: 3) or a step (1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 3


class StepFailed(Exception):
    """A step could not do its job; the message says what was missing or wrong."""

    exit_code = EXIT_FAILED


class NoGpu(StepFailed):
    """This host has no usable GPU: nothing after this can be measured here."""

    exit_code = EXIT_NO_GPU


@dataclass(frozen=True)
class Step:
    name: str  # for --skip
    title: str
    run: Callable[[Any], str]  # returns a one-line result; raises StepFailed


@dataclass(frozen=True)
class StepResult:
    number: int
    step: Step
    status: str  # passed | FAILED | skipped | not run
    seconds: float = 0.0
    detail: str = ""


def run_steps(steps: Sequence[Step], context: Any, skip: Sequence[str], out: TextIO) -> tuple[list[StepResult], int]:
    """Every step's result and the exit status; steps after a failure are "not run"."""
    results: list[StepResult] = []
    total = len(steps)
    for number, step in enumerate(steps, start=1):
        if step.name in skip:
            results.append(StepResult(number, step, "skipped"))
            print(f"step {number}/{total} {step.name}: {step.title}: skipped", file=out, flush=True)
            continue
        print(f"step {number}/{total} {step.name}: {step.title} ...", file=out, flush=True)
        started = time.monotonic()
        try:
            detail = step.run(context)
        except StepFailed as exc:
            seconds = time.monotonic() - started
            results.append(StepResult(number, step, "FAILED", seconds, str(exc)))
            following = f"step {number + 1} ({steps[number].title})" if number < total else "the end"
            print(f"  FAILED ({seconds:.1f} s): {exc}", file=out)
            print(f"acceptance: stopping before {following}", file=out, flush=True)
            results += [StepResult(later, steps[later - 1], "not run") for later in range(number + 1, total + 1)]
            return results, exc.exit_code
        seconds = time.monotonic() - started
        results.append(StepResult(number, step, "passed", seconds, detail))
        print(f"  passed ({seconds:.1f} s): {detail}", file=out, flush=True)
    return results, EXIT_OK
