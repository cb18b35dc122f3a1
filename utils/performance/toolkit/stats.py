"""Percentiles and report cells, one definition for every tool (a p95 means the same everywhere)."""

from __future__ import annotations

import math


def nearest_rank(values: list[float], percentile: float) -> float | None:
    """Percentile by nearest rank: the smallest value with at least p % of values <= it (no
    interpolation, so a reported p95 is a latency that really happened)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[nearest_rank_position(len(ordered), percentile) - 1]


def nearest_rank_position(count: int, percentile: float) -> int:
    """Which of ``count`` sorted values (1-based) is the percentile: the studies that ask how many
    turns must be fast for a percentile to be fast count it the same way."""
    return max(1, math.ceil(percentile / 100.0 * count))


def ms(value: float | None) -> str:
    """Whole milliseconds, ``-`` for a value that could not be measured."""
    return "-" if value is None else f"{value:.0f}"


def triple(values: list[float]) -> str:
    """``p50 / p95 / max`` (nearest rank), ``-`` where there is nothing to rank."""
    if not values:
        return "- / - / -"
    return f"{ms(nearest_rank(values, 50))} / {ms(nearest_rank(values, 95))} / {ms(max(values))}"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either side is missing (never a division by 0)."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator
