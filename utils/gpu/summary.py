"""The acceptance run's one results table (Markdown, so it pastes into docs/deployment-gpu.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from utils.gpu.steps import StepResult


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    width = max([len("measurement")] + [len(name) for name, _ in rows])
    lines = [f"| {'measurement'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines) + "\n"


def latency_value(row: dict[str, Any]) -> str:
    if row["p50"] is None:
        return f"no finals ({row['missing']}/{row['rows']} incomplete)"
    p95 = "-" if row["missing"] or row["p95"] is None else f"{row['p95']:.0f}"
    incomplete = f", {row['missing']}/{row['rows']} incomplete" if row["missing"] else ""
    return f"final p50 {row['p50']:.0f} ms, p95 {p95} ms{incomplete}"


def summary_rows(results: Sequence[StepResult], facts: dict[str, str], timings: dict[str, str],
                 latency: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    rows = [(name, value) for name, value in facts.items()]
    rows += [(f"step {r.number} {r.step.name}", r.status + (f" ({r.seconds:.0f} s)" if r.status in ("passed", "FAILED")
                                                           else "")) for r in results]
    rows += list(timings.items())
    rows += [(f"latency {row['provider']}, {row['seats']} seats x {row['length']:g} s", latency_value(row))
             for row in latency]
    return rows
