"""Soak: many cycles of connect / speak / disconnect; memory must return to its floor.

Starts a real server (tone model, TurnSense on) and runs ``--cycles`` sessions one after another; each speaks
a short tone sentence on two seats, finalizes, waits for both commits and closes.  The memory
probe samples the server every 200 ms; after ``--floor-after`` cycles the client pauses and
those idle samples are the floor; after the last cycle it pauses again for the end level.
Reports live sessions and buffered bytes from /metrics (both must be 0) and end RSS / floor.

    python utils/performance/soak.py --cycles 500
    python utils/performance/soak.py --cycles 200 --model whisper-base \
        --wav tests/fixtures/speech/en_go_forward_ten_meters.wav
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.client.session import connect  # noqa: E402
from tests.helpers import run_server, send_pcm, tone_pcm  # noqa: E402
from utils.performance.memory_probe import MemoryProbe  # noqa: E402

IDLE_S = 3.0


def gauge(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


async def cycle(url: str, pcm: bytes) -> None:
    async with connect(url) as session:
        await send_pcm(session, pcm, seat="driver")
        await send_pcm(session, pcm, seat="passenger")
        await session.finalize()
        commits = set()
        while len(commits) < 2:
            frame = await session.receive()
            if frame["type"] == "commit":
                commits.add(frame["seat"])
        await session.close()
        async for _ in session.frames():
            pass


async def soak(url: str, http: str, probe: MemoryProbe, cycles: int, floor_after: int, pcm: bytes) -> dict:
    started = time.monotonic()
    for index in range(1, cycles + 1):
        probe.mark("load")
        await cycle(url, pcm)
        if index == floor_after:
            probe.mark("idle")
            await asyncio.sleep(IDLE_S)
        if index % 50 == 0:
            print(f"\r  {index}/{cycles} cycles, {time.monotonic() - started:.0f} s", end="", file=sys.stderr,
                  flush=True)
    print(file=sys.stderr)
    probe.mark("end")
    await asyncio.sleep(IDLE_S)
    text = httpx.get(f"{http}/metrics").text
    return {"live_sessions": gauge(text, "kitt_live_sessions"), "buffered_bytes": gauge(text, "kitt_buffered_bytes"),
            "seats": gauge(text, "kitt_seats")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--floor-after", type=int, default=50)
    parser.add_argument("--model", default="tone", help="asr.model of the server")
    parser.add_argument("--wav", type=Path, help="speech to send (16 kHz mono WAV) instead of tone speech")
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    # SOAK_TURN_MODEL= (empty) runs without the end-of-turn model
    overrides = {"turn": {"model": os.environ.get("SOAK_TURN_MODEL", "turnsense") or None},
                 "asr": {"model": args.model}}
    pcm = read_wav_16k_mono(args.wav).tobytes() if args.wav else tone_pcm("打开车门", tail_ms=0)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, \
            run_server(Path(tmp), default_cache_dir(), overrides) as server:
        probe = MemoryProbe(server.process.pid).start()
        result = asyncio.run(soak(server.url, server.http, probe, args.cycles, args.floor_after, pcm))
        probe.stop()
    floor, end = probe.floor(phase="idle"), probe.floor(phase="end")
    print(f"cycles: {args.cycles}; live sessions after: {result['live_sessions']:.0f}; seats after: "
          f"{result['seats']:.0f}; buffered bytes after: {result['buffered_bytes']:.0f}")
    if floor and end:
        print(f"RSS floor after {args.floor_after} cycles: {floor / 1024:.1f} MiB; at the end: {end / 1024:.1f} MiB; "
              f"end/floor = {end / floor:.3f} (target <= 1.05)")
    print(f"USS floor {probe.floor('uss_kb', 'idle')} kB, end {probe.floor('uss_kb', 'end')} kB; "
          f"samples {len(probe.samples)}, pid reused: {probe.reused}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
