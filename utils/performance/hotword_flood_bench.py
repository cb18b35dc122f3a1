"""Hotword flood bench: does a client re-sending large hotword lists slow another session? (issue 19)

Starts a real server (tone model, whose engine builds hotword tries) and measures a BYSTANDER
session that sends a ``ping`` every 20 ms and times each ``pong``:

1. ``idle``: the bystander alone.
2. ``flood``: a FLOODER process (so its busy loop cannot delay the bystander's timestamps) sends
   ``configure`` frames as fast as the server reads them, each with a new list of 1000 hotwords
   of 64 characters the tone model knows (64,000 trie nodes per list: the largest the protocol
   allows), and reads every answer (so it is not closed as a slow consumer).
3. ``same list re-sent (no builds)``: the control: the same flood, but always the list in force,
   so nothing is built; what the server pays to read 130 KB messages (and the flooder's CPU).
4. ``flood, no budget`` (unless ``--no-unbudgeted``): phase 2 on a second server whose
   ``server.hotword_changes`` budget is out of the way, to show what the budget buys.

Printed: ping p50 / p99 / max per phase and p99 flood / idle (target: within ``--target-ratio``,
2x), what the flooder's configures got (applied, ``rate_limited``), and the cost of one
worst-case hotword list in-process, the old tokeniser (every substring length at every
position) next to the vocabulary walk now used.  Exit status 1 when the budgeted ratio misses
the target.

    python utils/performance/hotword_flood_bench.py                 # 10 s per phase
    python utils/performance/hotword_flood_bench.py --seconds 5 --no-unbudgeted
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import websockets

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.ctc import HotwordTrie, PieceIndex, tokenize_hotwords  # noqa: E402
from kitt_stt.asr.sense_voice_model import read_tokens  # noqa: E402
from kitt_stt.client.session import connect  # noqa: E402
from kitt_stt.hotwords import MAX_HOTWORD_CHARS, MAX_HOTWORDS, Hotword  # noqa: E402
from tests.helpers import run_server  # noqa: E402
from tests.test_hardening_units import reference_tokenize  # noqa: E402
from utils.performance.toolkit.server import parse_set  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.performance.toolkit.tables import markdown_table  # noqa: E402

PING_EVERY_S = 0.02
TONE_CHARACTERS = "打开关车门窗ABCDEF"  # every one a token of the tone model
UNBUDGETED = {"server": {"hotword_changes": {"per_s": 1_000_000.0, "burst": 1_000_000}}}


def hotword_list(rng: random.Random) -> list[str]:
    """1000 hotwords of 64 known characters: the protocol's largest trie."""
    return ["".join(rng.choice(TONE_CHARACTERS) for _ in range(MAX_HOTWORD_CHARS)) for _ in range(MAX_HOTWORDS)]


# ----- the flooder process --------------------------------------------------------------------------


async def flood(url: str, seconds: float, same_list: bool) -> dict[str, Any]:
    rng = random.Random(19)
    lists = [msgpack.packb({"type": "configure", "hotwords": hotword_list(rng)}) for _ in range(1 if same_list else 8)]
    answers: Counter[str] = Counter()
    sent = 0
    async with websockets.connect(url, max_size=1 << 22) as websocket:
        await websocket.recv()  # ready

        async def read() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                async for message in websocket:
                    frame = msgpack.unpackb(message)
                    answers[frame.get("code", frame["type"])] += 1

        reader = asyncio.create_task(read())
        deadline = time.monotonic() + seconds
        with contextlib.suppress(websockets.ConnectionClosed):
            while time.monotonic() < deadline:
                await websocket.send(lists[sent % len(lists)])  # a different list each time, unless same_list
                sent += 1
                await asyncio.sleep(0)  # a send that does not block never yields: let the reader run
        await asyncio.sleep(1.0)  # the answers still on their way
        reader.cancel()
    return {"sent": sent, "answers": dict(answers)}


class Flooder:
    def __init__(self, url: str, seconds: float, nice: int, same_list: bool) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--flooder", url, "--seconds", str(seconds),
                   "--flooder-nice", str(nice)] + (["--same-list"] if same_list else [])
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE)

    def result(self) -> dict[str, Any]:
        out, _ = self.process.communicate(timeout=120)
        return json.loads(out.decode().strip().splitlines()[-1])


# ----- the bystander ----------------------------------------------------------------------------------


async def ping_round_trips(url: str, seconds: float) -> list[float]:
    """Milliseconds from each ping sent to its pong received, one ping every 20 ms."""
    rtts: list[float] = []
    async with connect(url) as session:
        started = time.monotonic()
        index = 0
        while time.monotonic() - started < seconds:
            sent = time.perf_counter()
            await session.ping(index)
            while (frame := await asyncio.wait_for(session.receive(), 30)).get("type") != "pong" \
                    or frame["id"] != index:
                pass
            rtts.append((time.perf_counter() - sent) * 1000.0)
            index += 1
            delay = started + index * PING_EVERY_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
    return rtts


async def phase(url: str, seconds: float, flood: str | None, nice: int) -> tuple[list[float], dict[str, Any] | None]:
    """The bystander's round trips while ``flood`` (None, "changing" or "same") runs."""
    flooder = Flooder(url, seconds + 2.0, nice, flood == "same") if flood else None
    if flooder is not None:
        await asyncio.sleep(1.5)  # the flood is under way before the first ping
    rtts = await ping_round_trips(url, seconds)
    return rtts, (await asyncio.to_thread(flooder.result) if flooder is not None else None)


# ----- the trie build itself -------------------------------------------------------------------------


def build_cost_ms(tokens_path: Path, repeats: int = 3) -> tuple[float, float]:
    """Median ms to turn one worst-case list into a trie: the old tokeniser, then the walk."""
    vocabulary = {token: index for index, token in enumerate(read_tokens(tokens_path))}
    words = [Hotword(text) for text in hotword_list(random.Random(7))]
    pieces = PieceIndex(vocabulary)

    def old() -> None:
        HotwordTrie([(reference_tokenize(word, vocabulary), word.boost) for word in words])

    def new() -> None:
        HotwordTrie(tokenize_hotwords(words, pieces)[0])

    def median_ms(build: Any) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            build()
            times.append((time.perf_counter() - started) * 1000.0)
        return sorted(times)[len(times) // 2]

    return median_ms(old), median_ms(new)


# ----- report --------------------------------------------------------------------------------------------


def stats(rtts: list[float]) -> tuple[float, float, float]:
    return nearest_rank(rtts, 50) or 0.0, nearest_rank(rtts, 99) or 0.0, max(rtts, default=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="bystander pinging per phase")
    parser.add_argument("--no-unbudgeted", action="store_true", help="skip the phase without the budget")
    parser.add_argument("--target-ratio", type=float, default=2.0, help="max ping p99 flood / idle")
    parser.add_argument("--set", dest="sets", type=parse_set, action="append", default=[], metavar="KEY.PATH=YAML",
                        help="any other server setting (repeatable)")
    parser.add_argument("--flooder-nice", type=int, default=0,
                        help="niceness of the flooder process: on a machine with few cores it competes with the "
                             "server for CPU, which this separates from what the server itself does")
    parser.add_argument("--flooder", metavar="URL", help=argparse.SUPPRESS)  # internal: be the flooder process
    parser.add_argument("--same-list", action="store_true", help=argparse.SUPPRESS)  # internal: the flooder's
    args = parser.parse_args(argv)
    if args.flooder:
        if args.flooder_nice:
            os.nice(args.flooder_nice)
        print(json.dumps(asyncio.run(flood(args.flooder, args.seconds, args.same_list))), flush=True)
        return 0
    from kitt_stt.models.registry import default_cache_dir
    from tests.helpers import deep_merge

    overrides: dict[str, Any] = {}
    for item in args.sets:
        overrides = deep_merge(overrides, item)
    rows: list[tuple[str, list[float], dict[str, Any] | None]] = []
    with tempfile.TemporaryDirectory(prefix="hotword-flood-") as tmp:
        cache = Path(os.environ.get("KITT_STT_TEST_MODEL_CACHE") or default_cache_dir())
        with run_server(Path(tmp), cache, overrides) as server:
            for name, kind in (("idle", None), ("flood", "changing"), ("same list re-sent (no builds)", "same")):
                print(f"phase {name} ...", file=sys.stderr, flush=True)
                rtts, counts = asyncio.run(phase(server.url, args.seconds, kind, args.flooder_nice))
                rows.append((name, rtts, counts))
        if not args.no_unbudgeted:
            with run_server(Path(tmp), cache, deep_merge(overrides, UNBUDGETED)) as server:
                print("phase flood, no budget ...", file=sys.stderr, flush=True)
                rtts, counts = asyncio.run(phase(server.url, args.seconds, "changing", args.flooder_nice))
                rows.append(("flood, no budget", rtts, counts))
        old_ms, new_ms = build_cost_ms(cache / "tone" / "tokens.txt")
    idle_p99 = stats(rows[0][1])[1]
    print(f"\nbystander ping every {PING_EVERY_S * 1000:.0f} ms for {args.seconds:g} s per phase; flooder: configures "
          f"of {MAX_HOTWORDS} x {MAX_HOTWORD_CHARS}-character hotwords as fast as the server reads\n")
    cells = []
    for name, rtts, counts in rows:
        p50, p99, top = stats(rtts)
        flood_text = "-" if counts is None else f"{counts['sent']} sent; answers {counts['answers']}"
        cells.append([name, len(rtts), f"{p50:.2f}", f"{p99:.2f}", f"{top:.1f}", f"{p99 / idle_p99:.2f}", flood_text])
    print(markdown_table(["phase", "pings", "p50 (ms)", "p99 (ms)", "max (ms)", "p99 / idle p99",
                          "flooder's configures"], cells))
    print(f"\none worst-case list ({MAX_HOTWORDS} x {MAX_HOTWORD_CHARS} characters, tone vocabulary), median of 3: "
          f"old tokeniser {old_ms:.0f} ms, vocabulary walk {new_ms:.0f} ms ({old_ms / new_ms:.1f}x)")
    ratio = stats(rows[1][1])[1] / idle_p99
    verdict = "met" if ratio <= args.target_ratio else "MISSED"
    print(f"flood p99 / idle p99 = {ratio:.2f} (target <= {args.target_ratio:g}): {verdict}")
    return 0 if ratio <= args.target_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
