"""Sample a process's memory every 200 ms: RSS, PSS and USS, safely.

* RSS from ``/proc/PID/status`` (VmRSS); PSS and USS from ``/proc/PID/smaps_rollup``
  (USS = Private_Clean + Private_Dirty).
* A value that cannot be read is written as ``null``, never 0 (a zero would drag a floor down).
* PID reuse: the process's start time (``/proc/PID/stat`` field 22) is read once; samples from
  a different start time stop the probe.
* Samples carry a phase label set by the caller (``mark``); the idle floor is computed from
  samples labelled ``idle`` only, so warm-up, load and shutdown never count.

Library use: ``probe = MemoryProbe(pid); probe.start(); probe.mark("idle"); ...; probe.stop()``.
Command line: ``python utils/performance/memory_probe.py PID --seconds 30 --out samples.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

INTERVAL_S = 0.2


@dataclass
class Sample:
    t: float
    phase: str
    rss_kb: int | None
    pss_kb: int | None
    uss_kb: int | None


def start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 overall


def _kb_fields(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in names:
                found[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return found


def read_sample(pid: int, phase: str) -> Sample:
    status = _kb_fields(Path(f"/proc/{pid}/status"), ("VmRSS",))
    rollup = _kb_fields(Path(f"/proc/{pid}/smaps_rollup"), ("Pss", "Private_Clean", "Private_Dirty"))
    uss = None
    if "Private_Clean" in rollup and "Private_Dirty" in rollup:
        uss = rollup["Private_Clean"] + rollup["Private_Dirty"]
    return Sample(time.monotonic(), phase, status.get("VmRSS"), rollup.get("Pss"), uss)


_Sampler = TypeVar("_Sampler", bound="PhasedSampler")


class PhasedSampler:
    """A daemon thread that samples something every ``interval_s``, each sample labelled with the
    phase the tool marked last; subclasses say what one sample is in ``_run``."""

    def __init__(self, name: str, interval_s: float) -> None:
        self._interval = interval_s
        self._phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self: _Sampler) -> _Sampler:
        self._thread.start()
        return self

    def mark(self, phase: str) -> None:
        self._phase = phase

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class MemoryProbe(PhasedSampler):
    def __init__(self, pid: int, interval_s: float = INTERVAL_S) -> None:
        super().__init__("memory-probe", interval_s)
        self.pid = pid
        self.samples: list[Sample] = []
        self._start_time = start_time(pid)
        self.reused = False

    def _run(self) -> None:
        while not self._stop.is_set():
            now_start = start_time(self.pid)
            if now_start is None:
                return  # the process is gone
            if now_start != self._start_time:
                self.reused = True  # another process has this pid now: stop, do not mix samples
                return
            self.samples.append(read_sample(self.pid, self._phase))
            self._stop.wait(self._interval)

    def floor(self, field: str = "rss_kb", phase: str = "idle") -> float | None:
        """Median of the ``phase`` samples: the level memory settles at when nothing runs."""
        values = sorted(v for s in self.samples if s.phase == phase and (v := getattr(s, field)) is not None)
        return float(values[len(values) // 2]) if values else None

    def summary(self) -> dict[str, object]:
        phases = sorted({s.phase for s in self.samples})
        out: dict[str, object] = {"samples": len(self.samples), "pid_reused": self.reused}
        for phase in phases:
            rss = [s.rss_kb for s in self.samples if s.phase == phase and s.rss_kb is not None]
            out[phase] = {
                "samples": sum(1 for s in self.samples if s.phase == phase),
                "rss_kb_median": sorted(rss)[len(rss) // 2] if rss else None,
                "rss_kb_max": max(rss) if rss else None,
            }
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    probe = MemoryProbe(args.pid).start()
    probe.mark("idle")
    time.sleep(args.seconds)
    probe.stop()
    if args.out:
        args.out.write_text("".join(json.dumps(asdict(s)) + "\n" for s in probe.samples))
    print(json.dumps({**probe.summary(), "idle_floor_rss_kb": probe.floor()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
