"""The service's ``/metrics`` read as numbers, and scraped through a run by phase, so a bench can
say what the scheduler's queue did while it measured."""

from __future__ import annotations

import contextlib

import httpx

from utils.performance.memory_probe import PhasedSampler

METRICS_INTERVAL_S = 0.5

def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> ``{series: value}``, the series written as in the text (``name{labels}``)."""
    series: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            series[name] = float(value)
    return series


def metric(series: dict[str, float], name: str) -> float | None:
    return series.get(name)


def labelled(series: dict[str, float], name: str, label: str) -> dict[str, float]:
    """``kitt_errors_total{code="x"}`` -> ``{"x": value}`` for one label of one metric."""
    found: dict[str, float] = {}
    prefix = name + "{"
    for key, value in series.items():
        if key.startswith(prefix):
            for part in key[len(prefix):-1].split(","):
                label_name, _, label_value = part.partition("=")
                if label_name == label:
                    found[label_value.strip('"')] = found.get(label_value.strip('"'), 0.0) + value
    return found


def queue_depth(series: dict[str, float]) -> tuple[float, list[str]] | None:
    """Sum of every series whose metric name ends in ``queue_depth`` (the scheduler's today; the
    name may change or more may be added): returns the sum and the names it came from."""
    names = sorted(key for key in series if key.split("{")[0].endswith("queue_depth"))
    if not names:
        return None
    return sum(series[name] for name in names), names


class MetricsPoller(PhasedSampler):
    """Scrape /metrics every 500 ms in a thread, labelled with the bench's current phase."""

    def __init__(self, http: str, interval_s: float = METRICS_INTERVAL_S) -> None:
        super().__init__("metrics-poller", interval_s)
        self._url = f"{http}/metrics"
        self.samples: list[tuple[str, dict[str, float]]] = []
        self.failures = 0

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                try:
                    self.samples.append((self._phase, parse_metrics(client.get(self._url).text)))
                except httpx.HTTPError:
                    self.failures += 1
                self._stop.wait(self._interval)

    def queue_depth_max(self, phase: str) -> float | None:
        values = [depth[0] for p, series in self.samples if p == phase and (depth := queue_depth(series))]
        return max(values) if values else None

    def queue_depth_names(self) -> list[str]:
        names: set[str] = set()
        for _, series in self.samples:
            if depth := queue_depth(series):
                names.update(depth[1])
        return sorted(names)
