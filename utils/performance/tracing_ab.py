"""Does tracing cost latency?  The same workload against tracing on and off, in one run.

Two real servers (tone model, identical config except ``tracing.enabled``) run side by side;
rounds of the workload harness (default 4 seats x 15 s) alternate between them so drift of
the machine hits both equally.  Reports the median client final latency of each and the ratio.

    python utils/performance/tracing_ab.py --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers import run_server  # noqa: E402
from utils.performance.workload import nearest_rank, run_workload  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seats", type=int, default=4)
    parser.add_argument("--length", type=float, default=15.0)
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    cache = default_cache_dir()
    latencies: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="tracing-ab-") as tmp:
        work = Path(tmp)
        common = {"vad": {"max_segment_ms": 120_000}, "turn": {"model": None}}
        on = {**common, "tracing": {"enabled": True, "path": str(work / "trace.json.gz"), "flush_interval_s": 2.0}}
        with run_server(work, cache, common) as server_off, run_server(work, cache, on) as server_on:
            urls = {"off": server_off.url, "on": server_on.url}
            for round_index in range(args.rounds + 1):  # round 0 warms both up
                order = ("off", "on") if round_index % 2 else ("on", "off")
                for name in order:
                    rows = asyncio.run(run_workload(urls[name], args.seats, 1, [args.length], 1, 0, "打开车门", None,
                                                    300, progress=False))
                    if round_index:
                        latencies[name] += [r.client_final_latency_ms for r in rows if r.client_final_latency_ms]
                    assert all(all(row.checks.values()) for row in rows), rows
                print(f"\r  round {round_index}/{args.rounds}", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
    off, on = nearest_rank(latencies["off"], 50), nearest_rank(latencies["on"], 50)
    assert off and on
    print(f"{args.seats} seats x {args.length:g} s, {args.rounds} rounds each, alternating:")
    print(f"  median client final latency, tracing off: {off:.1f} ms ({len(latencies['off'])} finals)")
    print(f"  median client final latency, tracing on:  {on:.1f} ms ({len(latencies['on'])} finals)")
    print(f"  on / off = {on / off:.3f} (target within 3 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
