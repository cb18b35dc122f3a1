"""Producer latency while trace snapshots are written: our tracer vs a lock-held baseline.

Producer threads record spans at a steady rate (default 4 threads x 500 spans/s, about what
4 seats generate) while the trace, pre-filled to 56k or 75k events, is snapshotted and written
(gzip JSON, atomic rename) several times.  Each producer times every ``add`` call.

The baseline reproduces the old service: serialisation with ``json.dumps(indent=2)``, gzip and
the file write all happen inside the lock that producers take to append.  It exists only here.

    python utils/performance/tracer_probe.py --events 56000 75000 --snapshots 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kitt_stt.observability.trace import Tracer, TraceWriter, Track


class LockHeldTracer:
    """The old design: one lock for appends *and* for serialising the snapshot."""

    def __init__(self) -> None:
        self._events: list[dict] = []
        self._lock = threading.Lock()

    def add(self, name: str, category: str, start_us: int, duration_us: int, track: Track, args: dict) -> None:
        with self._lock:
            self._events.append({"ph": "X", "name": name, "cat": category, "ts": start_us, "dur": duration_us,
                                 "pid": track.pid, "tid": track.tid, "args": args})

    def write(self, path: Path) -> None:
        with self._lock:
            payload = json.dumps({"traceEvents": self._events}, indent=2).encode()
            temporary = path.with_name(path.name + ".partial")
            with gzip.open(temporary, "wb") as handle:
                handle.write(payload)
            os.replace(temporary, path)


def _fill(add, count: int) -> None:
    for index in range(count):
        add("asr.decode", "asr", index * 10, 5, Track(1 + index % 8, 1 + index % 4),
            {"session": "0123456789abcdef0123456789abcdef", "seat": "driver", "segment": index})


def run(kind: str, events: int, snapshots: int, producers: int, rate: float, out_dir: Path) -> dict:
    path = out_dir / f"{kind}-{events}.json.gz"
    if kind == "ours":
        tracer = Tracer(max_events=events, max_bytes=1 << 34)
        add = tracer.add
        writer = TraceWriter(tracer, path, interval_s=3600, keep_files=1)
        write = writer.write_now
    else:
        baseline = LockHeldTracer()
        add = baseline.add
        write = lambda: baseline.write(path)  # noqa: E731
    _fill(add, events)
    stop = threading.Event()
    writing = threading.Event()
    samples: list[list[float]] = [[] for _ in range(producers)]

    def produce(slot: int) -> None:
        interval = 1.0 / rate
        next_at = time.perf_counter()
        track, args = Track(99, slot), {"session": "probe", "seat": f"s{slot}", "segment": 0}
        while not stop.is_set():
            during = writing.is_set()
            begin = time.perf_counter_ns()
            add("ws.send", "ws", begin // 1000, 3, track, args)
            elapsed_us = (time.perf_counter_ns() - begin) / 1000.0
            if during or writing.is_set():  # the append overlapped a snapshot write
                samples[slot].append(elapsed_us)
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))

    threads = [threading.Thread(target=produce, args=(slot,), daemon=True) for slot in range(producers)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    durations = []
    for _ in range(snapshots):
        writing.set()
        started = time.perf_counter()
        write()
        durations.append((time.perf_counter() - started) * 1000.0)
        writing.clear()
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join()
    latencies = np.array([value for slot in samples for value in slot])
    return {
        "implementation": kind, "events": events, "appends_timed": int(latencies.size),
        "append_p50_us": float(np.percentile(latencies, 50)), "append_p99_us": float(np.percentile(latencies, 99)),
        "append_max_us": float(latencies.max()), "snapshot_ms_median": float(np.median(durations)),
        "file_bytes": path.stat().st_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[56_000, 75_000])
    parser.add_argument("--snapshots", type=int, default=5)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=500.0, help="spans per second per producer")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tracer-probe-") as tmp:
        for events in args.events:
            for kind in ("ours", "lock-held baseline"):
                print(f"  {kind}, {events} events ...", file=sys.stderr, flush=True)
                rows.append(run(kind, events, args.snapshots, args.producers, args.rate, Path(tmp)))
    print("| implementation | events | append p50 (µs) | append p99 (µs) | append max (µs) | snapshot (ms) | file |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['implementation']} | {row['events']} | {row['append_p50_us']:.1f} | "
              f"{row['append_p99_us']:.1f} | "
              f"{row['append_max_us']:.0f} | {row['snapshot_ms_median']:.0f} | {row['file_bytes'] / 1e6:.1f} MB |")
    by_events = {}
    for row in rows:
        by_events.setdefault(row["events"], {})[row["implementation"]] = row
    for events, pair in by_events.items():
        ours, base = pair["ours"], pair["lock-held baseline"]
        print(f"\n{events} events: append max {base['append_max_us'] / ours['append_max_us']:.0f}x lower, "
              f"p99 {base['append_p99_us'] / ours['append_p99_us']:.0f}x lower than the lock-held baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
