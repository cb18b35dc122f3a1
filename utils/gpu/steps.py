"""Run acceptance steps in order, each under its own time limit and all under one total budget.

Order is value: the rows that matter most come first, so a run cut off by its slot still has
them. A step that cannot start within what is left of the budget is skipped and says so. A
``fatal`` step (preflight, install, models: what every later step needs) ends the run when it
fails; any other failure is recorded and the next step runs, since the arms are independent.
Every result is handed to ``on_result`` as soon as it exists (acceptance.py writes it as a JSON
line), so nothing waits for the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

EXIT_OK, EXIT_FAILED, EXIT_MISSING = 0, 1, 2
MIN_STEP_S = 5.0


class StepFailed(Exception):
    """A step could not do its job; the message says what was missing or wrong."""

    exit_code = EXIT_FAILED


class Missing(StepFailed):
    """The preflight found something missing: nothing long was started."""

    exit_code = EXIT_MISSING


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    budget_s: float  # its time limit; sized for an H100/H200-class host
    run: Callable[[Any, float], str]  # (context, seconds it may take) -> one-line result; raises StepFailed
    fatal: bool = False
    skip_reason: Callable[[Any], str] = lambda ctx: ""  # "" to run; otherwise why it does not apply
    planned_s: Callable[[Any], float] | None = None  # the limit from the step's own plan (arms: its cells)

    def limit_s(self, context: Any) -> float:
        return self.planned_s(context) if self.planned_s else self.budget_s


@dataclass(frozen=True)
class StepResult:
    number: int
    step: Step
    status: str  # passed | FAILED | skipped | not run
    seconds: float = 0.0
    detail: str = ""
    limit_s: float = 0.0  # the limit it ran under (0: it did not run)


def run_steps(steps: Sequence[Step], context: Any, total_s: float, out: TextIO,
              on_result: Callable[[StepResult], None]) -> tuple[list[StepResult], int]:
    started = time.monotonic()
    results: list[StepResult] = []
    status = EXIT_OK

    def finish(result: StepResult) -> None:
        results.append(result)
        on_result(result)

    for number, step in enumerate(steps, start=1):
        label = f"step {number}/{len(steps)} {step.name}"
        reason = step.skip_reason(context)
        left = total_s - (time.monotonic() - started)
        if not reason and left < MIN_STEP_S:
            reason = f"the run's budget of {total_s:.0f} s is spent"
        if reason:
            print(f"{label}: skipped ({reason})", file=out, flush=True)
            finish(StepResult(number, step, "skipped", detail=reason))
            continue
        limit = min(step.limit_s(context), left)
        print(f"{label}: {step.title} (limit {limit:.0f} s) ...", file=out, flush=True)
        begun = time.monotonic()
        try:
            detail = step.run(context, limit)
        except StepFailed as exc:
            seconds = time.monotonic() - begun
            print(f"  FAILED ({seconds:.1f} s): {exc}", file=out, flush=True)
            finish(StepResult(number, step, "FAILED", seconds, str(exc), limit))
            status = max(status, exc.exit_code) if status != EXIT_MISSING else status
            if step.fatal:
                print(f"acceptance: stopping: {step.name} is needed by every later step", file=out, flush=True)
                for later in range(number + 1, len(steps) + 1):
                    finish(StepResult(later, steps[later - 1], "not run", detail=f"{step.name} failed"))
                return results, exc.exit_code
            continue
        seconds = time.monotonic() - begun
        print(f"  passed ({seconds:.1f} s): {detail}", file=out, flush=True)
        finish(StepResult(number, step, "passed", seconds, detail, limit))
    return results, status
