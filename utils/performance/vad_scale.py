"""The scale run: N one-seat connections streaming low noise in real time, one more pinging every
100 ms, against servers that differ only in their speech detector, measured as an outside client
would: ping round trip p50/p99 and the server process's CPU (from /proc) per seat-second.

The arms (``--arms``): ``webrtc`` (webrtcvad + the cabin front end), ``silero`` (Silero scored on
the event loop, ``vad.batch: 0``) and ``batched`` (Silero's batch thread, ``vad.batch: 64``). All
servers start first and stay up; then, for each connection count, the arms take turns (the
order reversed every other round), so that whatever else the machine does lands on all of them.
The ping runs in a process of its own, so the load generator's loop does not delay its pongs;
the load generator's own lag (how late its frames left, p99) is printed too: when it is large the
machine, not the server, is the limit. ``--baseline DIR`` adds an older checkout's webrtc and
silero as arms of the same run (the before/after of docs/performance.md). ``--workers 1 2`` runs
each arm with that many server processes (``server.workers``; arms ``NAME/wN``, CPU summed over
the server's process tree), side by side. Tone model: the recognizer stays idle (no speech).

    python utils/performance/vad_scale.py --connections 16 32 64 128 --seconds 10 --rounds 2 \\
        --cache ~/.cache/kitt-stt
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import websockets

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers import RunningServer, run_server  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402

ARMS: dict[str, dict[str, Any]] = {
    "webrtc": {"engine": "webrtc"},
    "silero": {"engine": "silero", "batch": 0},
    "batched": {"engine": "silero", "batch": 64},
}
FRAME_S = 0.02
PING_EVERY_S = 0.1
NOISE_DBFS = -50.0


def noise_frames(seconds: float, seed: int) -> list[bytes]:
    """Low white noise as encoded audio frames (one packing for all connections)."""
    rng = np.random.default_rng(seed)
    samples = rng.normal(0.0, 32768.0 * 10 ** (NOISE_DBFS / 20), int(16000 * seconds))
    pcm = np.clip(samples, -32768, 32767).astype("<i2").tobytes()
    return [msgpack.packb({"type": "audio", "seat": "default", "pcm": pcm[i : i + 640]}, use_bin_type=True)
            for i in range(0, len(pcm) - 639, 640)]


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads) and its descendants (workers, ITN), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return own + sum(process_cpu_s(int(child)) for child in children if Path(f"/proc/{child}").exists())


async def stream(url: str, frames: list[bytes], until: float, lags: list[float], started: asyncio.Event) -> None:
    async with websockets.connect(url, max_size=1 << 22, open_timeout=60) as ws:
        await ws.recv()  # ready
        started.set()
        reader = asyncio.create_task(_discard(ws))
        try:
            next_at, index = time.monotonic(), 0
            while next_at < until:
                await ws.send(frames[index % len(frames)])
                lags.append(time.monotonic() - next_at)
                index += 1
                next_at += FRAME_S
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            reader.cancel()


async def _discard(ws: Any) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in ws:
            pass


async def ping_only(url: str, seconds: float, warmup_s: float) -> None:
    """The ping process: print the round trips (ms) measured after ``warmup_s`` as JSON."""
    rtts: list[float] = []
    async with websockets.connect(url, open_timeout=60) as ws:  # a saturated server is slow to answer
        await ws.recv()
        begin = time.monotonic()
        end = begin + warmup_s + seconds
        next_at, ping_id = begin, 0
        while next_at < end:
            sent = time.monotonic()
            await ws.send(msgpack.packb({"type": "ping", "id": ping_id}))
            while True:
                frame = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 10), raw=False)
                if frame.get("type") == "pong" and frame.get("id") == ping_id:
                    break
            if sent - begin >= warmup_s:
                rtts.append((time.monotonic() - sent) * 1000.0)
            ping_id += 1
            next_at += PING_EVERY_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    print(json.dumps(rtts))


async def measure(server: RunningServer, connections: int, seconds: float, warmup_s: float) -> dict[str, float]:
    frames = noise_frames(10.0, seed=connections)
    lags: list[float] = []
    until = time.monotonic() + 30.0 + warmup_s + seconds  # stopped once the ping is done
    opened = [asyncio.Event() for _ in range(connections)]
    streams = [asyncio.create_task(stream(server.url, frames, until, lags, event)) for event in opened]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 30)
    pinger = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--ping-only", server.url, str(seconds), str(warmup_s),
        stdout=asyncio.subprocess.PIPE)
    await asyncio.sleep(warmup_s)
    lags.clear()
    cpu_before, wall_before, own_before = process_cpu_s(server.process.pid), time.monotonic(), time.process_time()
    output, _ = await pinger.communicate()
    cpu = process_cpu_s(server.process.pid) - cpu_before
    own = time.process_time() - own_before
    wall = time.monotonic() - wall_before
    for task in streams:
        task.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    await settled(server.process.pid)
    rtts = json.loads(output) if output.strip() else []  # no answer at all: the server is saturated
    return {"ping_p50_ms": nearest_rank(rtts, 50) or math.inf, "ping_p99_ms": nearest_rank(rtts, 99) or math.inf,
            "cpu_ms_per_seat_s": cpu / (connections * wall) * 1000.0,
            "cpu_share": cpu / wall, "client_cpu_share": own / wall,
            "client_lag_p99_ms": nearest_rank(lags, 99) * 1000.0 if lags else 0.0}


async def settled(pid: int, limit_s: float = 60.0) -> None:
    """Wait until a server that fell behind has worked off its backlog (under 5 % of a core over
    half a second), so that the next arm does not start on a machine it is still using."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = process_cpu_s(pid)
        await asyncio.sleep(0.5)
        if process_cpu_s(pid) - before < 0.025:
            return


@contextlib.contextmanager
def servers(arms: list[str], cache: Path, tmp: Path,
            baseline: Path | None = None) -> Iterator[dict[str, RunningServer]]:
    """One server per arm; an arm named ``NAME@base`` runs the code in ``baseline`` (a checkout of
    an older commit: ``python -m kitt_stt`` imports the package from its working directory)."""
    with contextlib.ExitStack() as stack:
        started = {}
        for arm in arms:
            name, _, base = arm.partition("@")
            name, _, workers = name.partition("/w")
            vad = {key: value for key, value in ARMS[name].items() if not (base and key == "batch")}
            overrides = {"vad": vad, "server": {"max_connections": 512, "idle_timeout_s": 0,
                                                **({"workers": int(workers)} if workers else {})}}
            (tmp / arm.replace("/", "-")).mkdir()
            here = Path.cwd()
            os.chdir(baseline if base and baseline else REPO)
            try:
                started[arm] = stack.enter_context(run_server(tmp / arm.replace("/", "-"), cache, overrides))
            finally:
                os.chdir(here)
        yield started


async def run(args: argparse.Namespace) -> None:
    import tempfile

    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    arms = args.arms if args.workers is None else [f"{arm}/w{n}" for arm in args.arms for n in args.workers]
    arms += [f"{arm}@base" for arm in ("webrtc", "silero")] if args.baseline else []
    with tempfile.TemporaryDirectory(prefix="vad-scale-") as tmp, \
            servers(arms, args.cache, Path(tmp), args.baseline) as running:
        for connections in args.connections:
            for round_index in range(args.rounds):
                order = arms if round_index % 2 == 0 else list(reversed(arms))
                for arm in order:
                    row = await measure(running[arm], connections, args.seconds, args.warmup)
                    results.setdefault((arm, connections), []).append(row)
                    print(f"# {arm} {connections} round {round_index + 1}: "
                          + ", ".join(f"{key} {value:.2f}" for key, value in row.items()), flush=True)
    print_table(arms, args.connections, results)


def print_table(arms: list[str], counts: list[int], results: dict[tuple[str, int], list[dict[str, float]]]) -> None:
    """Medians over rounds; CPU also as µs per seat-frame and as a ratio to the first arm."""
    print("\n| detector | connections | ping p50 / p99 (ms) | server CPU (% of a core) | µs per seat-frame | "
          f"CPU / {arms[0]} | load generator lag p99 (ms) | load generator CPU (% of a core) |")
    print("|---|---|---|---|---|---|---|---|")
    for connections in counts:
        base = float(np.median([row["cpu_ms_per_seat_s"] for row in results[(arms[0], connections)]]))
        for arm in arms:
            rows = results[(arm, connections)]

            def median(key: str, rows: list[dict[str, float]] = rows) -> float:
                return float(np.median([row[key] for row in rows]))
            per_frame_us = median("cpu_ms_per_seat_s") * 1000.0 * FRAME_S
            print(f"| {arm} | {connections} | {median('ping_p50_ms'):.1f} / {median('ping_p99_ms'):.1f} | "
                  f"{median('cpu_share') * 100:.0f} | {per_frame_us:.0f} | "
                  f"{median('cpu_ms_per_seat_s') / base:.2f} | {median('client_lag_p99_ms'):.1f} | "
                  f"{median('client_cpu_share') * 100:.0f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ping-only":
        asyncio.run(ping_only(sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))
        return
    from kitt_stt.models.registry import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per arm and count")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="a checkout of an older commit: adds its webrtc and silero "
                        "as arms NAME@base (e.g. `git archive 676c043 | tar -x -C /tmp/old`)")
    parser.add_argument("--workers", type=int, nargs="+", help="server.workers of each arm, e.g. 1 2")
    parser.add_argument("--cache", type=Path, default=default_cache_dir(), help="model cache (tone, silero-vad)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
