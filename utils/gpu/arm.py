"""One provider's arm of the A/B: a production-settings server, seats speaking in real time over
several connections, final latency per seat count and length, one JSON line per cell.

    python -m utils.gpu.arm --provider cuda --model DIR --out OUT --step ab-4 --seats 4 \\
        --lengths 3 15 30 --rounds 5 --warmup 1

Run by acceptance.py in its own process (with the private target folder first on the path and
the NVIDIA library folders on LD_LIBRARY_PATH), so arms can run side by side on disjoint CPU
cores. The workload is utils/performance/workload.py's: synchronised seats, 20 ms frames on
absolute deadlines, ``vad stop`` at the end; latency is client-side, vad stop -> the last final.
Warm-up rounds (the shortest length, every connection) run first and are not counted. The tone
phrase is spoken with pauses shorter than the production VAD's ``silence_ms`` and longer than
``chunk_pause_ms``, so each utterance is one segment decoded in chunks as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from utils.gpu import record  # noqa: E402
from utils.gpu.server import memory, run_config, serve  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.performance.workload import Row, run_workload  # noqa: E402

PHRASE = "打开车门"
PAUSE_MS = 150  # < vad.silence_ms (200) of config.yaml, > asr.chunk_pause_ms (100)
MAX_SEATS_PER_CONNECTION = 8  # config.yaml's server.max_seats


def layout(seats: int) -> tuple[int, int]:
    """(connections, seats per connection): always several connections, at most 8 seats each."""
    connections = 2 if seats <= 4 else 4 if seats <= 16 else math.ceil(seats / MAX_SEATS_PER_CONNECTION)
    return connections, math.ceil(seats / connections)


def stats(values: list[float]) -> dict[str, float | None]:
    return {"p50": nearest_rank(values, 50), "p95": nearest_rank(values, 95), "n": len(values)}


def cell(rows: list[Row]) -> dict[str, Any]:
    def values(name: str) -> list[float]:
        return [value for row in rows if (value := getattr(row, name)) is not None]

    texts = Counter(row.text for row in rows)
    return {"samples": len(rows), "missing": sum(row.client_final_latency_ms is None for row in rows),
            "final_ms": stats(values("client_final_latency_ms")), "server_ms": stats(values("server_latency_ms")),
            "commit_ms": stats(values("eot_latency_ms")),
            "checks_failed": {name: sum(not row.checks.get(name, False) for row in rows)
                              for name in (rows[0].checks if rows else {})},
            "commit_reasons": dict(Counter(row.commit_reason or "none" for row in rows)),
            "pacing_p95_ms": nearest_rank([row.pacing_error_ms_p95 for row in rows], 95),
            "texts": [[text[:120], count] for text, count in texts.most_common(3)]}


def run_arm(args: argparse.Namespace) -> int:
    work = args.work / f"{args.step}-{args.provider}"
    work.mkdir(parents=True, exist_ok=True)
    layouts = {seats: layout(seats) for seats in args.seats}
    max_per = max(per for _, per in layouts.values())
    config = run_config(args.model, args.provider, args.trt_cache, args.turnsense, args.work / "models", max_per,
                        args.device_id)
    started = time.monotonic()
    with serve(config, work, "server") as server:
        ready_s = time.monotonic() - started
        at_ready = memory(server.process.pid)
        common = {"step": args.step, "provider": args.provider, "model": args.model.name}
        for connections, per in layouts.values():
            if args.warmup:
                asyncio.run(run_workload(server.url, per, connections, [min(args.lengths)], 0, args.warmup, PHRASE,
                                         None, PAUSE_MS, progress=False))
            for length in args.lengths:
                cell_started = time.monotonic()
                rows = asyncio.run(run_workload(server.url, per, connections, [length], args.rounds, 0, PHRASE, None,
                                                PAUSE_MS, progress=False))
                if server.process.poll() is not None:
                    raise RuntimeError(f"the {args.provider} server died:\n{server.tail()}")
                record.append(args.out, "cell", **common, seats=connections * per, connections=connections,
                              length_s=length, rounds=args.rounds, warmup_rounds=args.warmup,
                              seconds=round(time.monotonic() - cell_started, 1), ready_s=round(ready_s, 1),
                              memory_ready=at_ready, memory=memory(server.process.pid), **cell(rows))
                print(f"{args.provider} {connections * per} seats x {length:g} s: done", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", required=True, choices=["cpu", "cuda", "tensorrt"])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--turnsense", type=Path)
    parser.add_argument("--trt-cache", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--step", required=True)
    parser.add_argument("--seats", type=int, nargs="+", default=[4])
    parser.add_argument("--lengths", type=float, nargs="+", default=[3.0, 15.0, 30.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device-id", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        return run_arm(args)
    except RuntimeError as exc:
        print(f"arm {args.provider}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
