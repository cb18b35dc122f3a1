"""Does tracing cost latency?  The same workload with tracing on and off, in one run.

One real server (tone model) with tracing enabled; ``POST /debug/tracing?enabled=…`` pauses
and resumes span recording between rounds of the workload harness (default 4 seats x 15 s),
alternating the order every round, so both arms share the process, its caches and the
machine's drift.  Reports the median client final latency of each arm and their ratio.
(Comparing two separate server processes instead showed a 7 % difference in favour of the
traced one: process-to-process noise, larger than any tracing cost.)

    python utils/performance/tracing_ab.py --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers import run_server  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.performance.workload import run_workload  # noqa: E402

TOKEN = "tracing-ab"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seats", type=int, default=4)
    parser.add_argument("--length", type=float, default=15.0)
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    latencies: dict[str, list[float]] = {"off": [], "on": []}
    events = 0.0
    with tempfile.TemporaryDirectory(prefix="tracing-ab-") as tmp:
        work = Path(tmp)
        overrides = {"vad": {"max_segment_ms": 120_000}, "turn": {"model": None},
                     "tracing": {"enabled": True, "path": str(work / "trace.json.gz"), "flush_interval_s": 2.0},
                     "debug": {"trace_enabled": True, "token": TOKEN}}
        with run_server(work, default_cache_dir(), overrides) as server:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            for round_index in range(args.rounds + 1):  # round 0 warms up
                order = ("off", "on") if round_index % 2 else ("on", "off")
                for arm in order:
                    httpx.post(f"{server.http}/debug/tracing", params={"enabled": arm == "on"}, headers=headers)
                    rows = asyncio.run(run_workload(server.url, args.seats, 1, [args.length], 1, 0, "打开车门", None,
                                                    300, progress=False))
                    assert all(all(row.checks.values()) for row in rows), rows
                    if round_index:
                        latencies[arm] += [r.client_final_latency_ms for r in rows if r.client_final_latency_ms]
                print(f"\r  round {round_index}/{args.rounds}", end="", file=sys.stderr, flush=True)
            metrics = httpx.get(f"{server.http}/metrics").text
            events = next(float(line.split()[-1]) for line in metrics.splitlines()
                          if line.startswith("kitt_trace_events "))
            print(file=sys.stderr)
    off, on = nearest_rank(latencies["off"], 50), nearest_rank(latencies["on"], 50)
    assert off and on
    print(f"{args.seats} seats x {args.length:g} s, {args.rounds} rounds per arm, alternating, one server:")
    print(f"  median client final latency, tracing off: {off:.1f} ms ({len(latencies['off'])} finals)")
    print(f"  median client final latency, tracing on:  {on:.1f} ms ({len(latencies['on'])} finals)")
    print(f"  on / off = {on / off:.3f} (target: within 3 %); trace events retained: {events:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
