"""Soak: many cycles of connect / speak / disconnect; memory must return to its floor.

Starts a real server (tone model, TurnSense on) and runs ``--cycles`` sessions one after another; each speaks
a short tone sentence on two seats, finalizes, waits for both commits and closes.  The memory
probe samples the server every 200 ms; after ``--floor-after`` cycles the client pauses and
those idle samples are the floor; after the last cycle it pauses again for the end level.
Reports live sessions, seats and buffered bytes from /metrics (all must be 0), delivery (every
``speech_start`` gets exactly one final, every seat that spoke one commit) and end RSS / floor.

``--abuse`` makes every cycle a mix of what a hostile or broken client does, each followed by
checks that the server still serves everyone (issue 11):

(a) the normal session above;
(b) a connection that first sends malformed frames (random bytes, msgpack that is not a map,
    unknown types, wrong field types, oversized or ragged pcm, text messages, huge seat names,
    control characters, a duplicate ``seq``), then the same normal exchange, which must still work;
(c) a ``--flood-s`` flood on 8 seats (``vad start`` / 20 ms audio / ``vad stop`` / ``finalize`` as
    fast as possible, as ``flood_bench.py`` does: ``toolkit/flooder.py``), then the transport dropped without ``close``;
(d) a connection that opens and goes silent: closed by the client after 0.5 s or, with
    ``--idle-timeout-s`` (passed to the server as ``server.idle_timeout_s``; without it the
    server's own setting applies, so an older server that lacks the key still starts), left
    for the server's idle timeout, which must close it.

Exit status 1 when sessions, seats or buffered bytes are not back to 0, a final or commit was
lost or duplicated, a malformed frame broke its connection, or (with ``--idle-timeout-s``) the
server left a silent connection open.

    python utils/performance/soak.py --cycles 500
    python utils/performance/soak.py --cycles 200 --model whisper-base \
        --wav tests/fixtures/speech/en_go_forward_ten_meters.wav
    python utils/performance/soak.py --abuse --cycles 200 --idle-timeout-s 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import websockets

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.client.session import SttSession, connect, decode  # noqa: E402
from tests.helpers import send_pcm, tone_pcm  # noqa: E402
from utils.performance.memory_probe import MemoryProbe  # noqa: E402
from utils.performance.toolkit.flooder import FloodCounts, flood, flood_summary, loudest_frame  # noqa: E402
from utils.performance.toolkit.malformed import fuzz_messages  # noqa: E402
from utils.performance.toolkit.prometheus import metric, parse_metrics  # noqa: E402
from utils.performance.toolkit.server import bench_server  # noqa: E402

IDLE_S = 3.0
SEATS = ("driver", "passenger")
SILENT_S = 0.5  # how long a silent connection lives when the client closes it itself
IDLE_GRACE_S = 5.0  # how late past server.idle_timeout_s the server may close a silent connection
DRAIN_S = 5.0  # after ``close``, how long the server gets to flush and close the socket
LEFTOVER_GAUGES = {"live sessions": "kitt_live_sessions", "seats": "kitt_seats",
                   "buffered bytes": "kitt_buffered_bytes"}


# ----- delivery accounting ------------------------------------------------------------------------


@dataclass
class Ledger:
    """What every connection of the soak got back, tallied as the protocol promises it:
    each ``speech_start`` exactly one ``final``, each seat that spoke one ``commit``."""

    sessions: Counter[str] = field(default_factory=Counter)  # connections opened, by kind
    refused: Counter[str] = field(default_factory=Counter)  # connections the server would not open
    speech_starts: int = 0
    finals: int = 0
    lost_finals: int = 0
    duplicate_finals: int = 0
    orphan_finals: int = 0  # a final with no speech_start before it
    lost_commits: int = 0
    errors: dict[str, Counter[str]] = field(default_factory=dict)  # by kind of connection, then by code
    fatal_errors: Counter[str] = field(default_factory=Counter)
    broken: list[str] = field(default_factory=list)  # exchanges that failed, described
    fuzz_sent: int = 0  # malformed frames that each deserve an error frame
    fuzz_uncertain: int = 0  # frames whose answer the protocol leaves open (sent, not counted)
    fuzz_answers: int = 0  # error frames that came back before the fuzz connection's pong
    silent: Counter[str] = field(default_factory=Counter)  # how silent connections ended
    silent_close_s: list[float] = field(default_factory=list)  # open -> closed by the server
    flood: FloodCounts = field(default_factory=FloodCounts)

    def account(self, frames: list[dict[str, Any]], spoke: tuple[str, ...], kind: str) -> None:
        """Tally one connection's frames; ``spoke`` are the seats that must each get a commit."""
        starts: dict[str, set[Any]] = {}
        finals: dict[str, Counter[Any]] = {}
        committed: set[str] = set()
        errors = self.errors.setdefault(kind, Counter())
        for frame in frames:
            frame_type, seat = frame.get("type"), str(frame.get("seat"))
            if frame_type == "speech_start":
                starts.setdefault(seat, set()).add(frame.get("segment_id"))
            elif frame_type == "final":
                finals.setdefault(seat, Counter())[frame.get("segment_id")] += 1
            elif frame_type == "commit":
                committed.add(seat)
            elif frame_type == "error":
                errors[str(frame.get("code"))] += 1
                if frame.get("fatal"):
                    self.fatal_errors[f"{kind}: {frame.get('code')}"] += 1
        for seat in set(starts) | set(finals):
            started, got = starts.get(seat, set()), finals.get(seat, Counter())
            self.speech_starts += len(started)
            self.finals += sum(got.values())
            self.lost_finals += len(started - set(got))
            self.duplicate_finals += sum(count - 1 for count in got.values() if count > 1)
            self.orphan_finals += len(set(got) - started)
        self.lost_commits += len(set(spoke) - committed)

    def note(self, problem: str) -> None:
        if len(self.broken) < 20:
            self.broken.append(problem)
        elif len(self.broken) == 20:
            self.broken.append("... (more not shown)")

    def problems(self, leftovers: dict[str, float | None], idle_timeout_s: float | None) -> list[str]:
        """Why the soak fails; empty when it passes."""
        found = [f"{label} = {'missing from /metrics' if value is None else f'{value:.0f}'} after the soak"
                 for label, value in leftovers.items() if value is None or value != 0]
        for label, value in (("lost finals", self.lost_finals), ("duplicate finals", self.duplicate_finals),
                             ("finals without speech_start", self.orphan_finals),
                             ("lost commits", self.lost_commits)):
            if value:
                found.append(f"{value} {label}")
        # a flood may be cut off and a silent connection closed with a fatal error frame; nothing else may
        found += [f"{count} fatal error frames ({what})" for what, count in self.fatal_errors.items()
                  if what.split(":")[0] in ("normal", "fuzz")]
        found += [f"broken: {problem}" for problem in self.broken]
        if idle_timeout_s is not None and self.silent["left open by the server"]:
            found.append(f"{self.silent['left open by the server']} silent connections not closed by the server "
                         f"within {idle_timeout_s + IDLE_GRACE_S:g} s")
        return found


# ----- the kinds of connection ----------------------------------------------------------------------


async def _collect(session: SttSession, frames: list[dict[str, Any]], done: Any, timeout_s: float) -> bool:
    """Receive into ``frames`` until ``done(frames)``; False on timeout or a closed connection."""
    deadline = time.monotonic() + timeout_s
    while not done(frames):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            frames.append(await asyncio.wait_for(session.receive(), remaining))
        except (TimeoutError, websockets.ConnectionClosed):
            return False
    return True


async def exchange(session: SttSession, pcm: bytes, frames: list[dict[str, Any]], timeout_s: float) -> bool:
    """Speak on both seats, finalize, wait for both commits, ``close`` and drain until the server
    closes the socket: the whole life of a well-behaved session.  False when it did not finish."""
    for seat in SEATS:
        await send_pcm(session, pcm, seat=seat)
    await session.finalize()
    committed = await _collect(
        session, frames, lambda got: {f.get("seat") for f in got if f.get("type") == "commit"} >= set(SEATS),
        timeout_s)
    await session.close()
    try:
        async with asyncio.timeout(DRAIN_S):
            async for frame in session.frames():
                frames.append(frame)
    except (TimeoutError, websockets.ConnectionClosed):
        return False
    return committed


async def normal_session(url: str, pcm: bytes, ledger: Ledger, timeout_s: float) -> None:
    frames: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout_s + DRAIN_S + 15), connect(url) as session:  # however the server behaves
            ledger.sessions["normal"] += 1
            if not await exchange(session, pcm, frames, timeout_s):
                ledger.note(f"normal session {session.ready.get('session_id')}: did not finish in {timeout_s:g} s")
    except ConnectionError as exc:  # an error frame instead of ready
        ledger.refused["normal"] += 1
        ledger.note(f"normal session refused: {exc}")
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        ledger.note(f"normal session failed: {type(exc).__name__}: {exc}")
    ledger.account(frames, SEATS, "normal")


async def fuzz_session(url: str, pcm: bytes, rng: random.Random, ledger: Ledger, timeout_s: float) -> None:
    """Malformed frames, then a normal exchange on the same connection: a bad frame must cost the
    sender one error frame and nothing else."""
    frames: list[dict[str, Any]] = []
    messages = fuzz_messages(rng)
    rng.shuffle(messages)
    try:
        async with asyncio.timeout(2 * timeout_s + DRAIN_S + 15), connect(url) as session:
            ledger.sessions["fuzz"] += 1
            for _, message, code in messages:
                await session.websocket.send(message)
                ledger.fuzz_sent += code is not None
                ledger.fuzz_uncertain += code is None
            await session.ping("fuzz-done")  # frames are answered in order: its pong follows every answer
            def ponged(got: list[dict[str, Any]]) -> bool:
                return any(f.get("type") == "pong" and f.get("id") == "fuzz-done" for f in got)

            if not await _collect(session, frames, ponged, timeout_s):
                ledger.note("fuzz: no pong after the malformed frames (connection closed or stuck)")
            ledger.fuzz_answers += sum(1 for f in frames if f.get("type") == "error")
            if not await exchange(session, pcm, frames, timeout_s):
                ledger.note(f"fuzz session {session.ready.get('session_id')}: normal exchange after the malformed "
                            f"frames did not finish in {timeout_s:g} s")
    except ConnectionError as exc:
        ledger.refused["fuzz"] += 1
        ledger.note(f"fuzz session refused: {exc}")
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        ledger.note(f"fuzz session failed: {type(exc).__name__}: {exc}")
    ledger.account(frames, SEATS, "fuzz")


async def flood_burst(url: str, frame: bytes, seconds: float, ledger: Ledger) -> None:
    """A short flood on 8 seats, then the transport dropped without ``close``."""
    deadline = time.monotonic() + seconds
    before = ledger.flood.connections + ledger.flood.refused
    try:
        async with asyncio.timeout(seconds + 15):  # a send blocked on a server that stopped reading
            await flood(url, 8, frame, lambda: time.monotonic() >= deadline, ledger.flood, reconnect=False)
    except TimeoutError:
        ledger.note(f"flood: still not done {seconds + 15:g} s after it began (the server stopped reading?)")
    ledger.sessions["flood"] += ledger.flood.connections + ledger.flood.refused - before


async def silent_connection(url: str, idle_timeout_s: float | None, ledger: Ledger) -> None:
    """Open a session and send nothing (not even WebSocket pings, which a server may count as
    activity): the client closes it after 0.5 s, or the server's idle timeout must."""
    opened = time.monotonic()
    try:
        websocket = await websockets.connect(url, open_timeout=10, ping_interval=None, close_timeout=2)
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        ledger.note(f"silent connection failed: {type(exc).__name__}: {exc}")
        return
    ledger.sessions["silent"] += 1
    frames: list[dict[str, Any]] = []
    try:
        if idle_timeout_s is None:
            await asyncio.sleep(SILENT_S)
            ledger.silent["closed by the client"] += 1
            return
        try:
            async with asyncio.timeout(idle_timeout_s + IDLE_GRACE_S):
                async for message in websocket:
                    with contextlib.suppress(ValueError):
                        frames.append(decode(message))
        except TimeoutError:
            ledger.silent["left open by the server"] += 1
            return
        except websockets.ConnectionClosed:
            pass
        ledger.silent[f"closed by the server ({websocket.close_code})"] += 1
        ledger.silent_close_s.append(time.monotonic() - opened)
    finally:
        with contextlib.suppress(Exception):
            await websocket.close()
        ledger.account([f for f in frames if f.get("type") != "ready"], (), "silent")


# ----- the soak -------------------------------------------------------------------------------------


async def soak(url: str, http: str, probe: MemoryProbe, args: argparse.Namespace, pcm: bytes,
               ledger: Ledger) -> dict[str, float | None]:
    started = time.monotonic()
    rng = random.Random(args.seed)
    flood_frame = loudest_frame(np.frombuffer(pcm, dtype="<i2"))
    silent: list[asyncio.Task[None]] = []
    step = 50 if not args.abuse else max(1, min(50, args.cycles // 20))
    for index in range(1, args.cycles + 1):
        probe.mark("load")
        await normal_session(url, pcm, ledger, args.timeout_s)
        if args.abuse:
            await fuzz_session(url, pcm, rng, ledger, args.timeout_s)
            await flood_burst(url, flood_frame, args.flood_s, ledger)
            task = asyncio.create_task(silent_connection(url, args.idle_timeout_s, ledger))
            if args.idle_timeout_s is None:
                await task
            else:
                silent.append(task)  # lives on while the next cycles run; the server must close it
        if index == args.floor_after:
            await asyncio.gather(*silent)
            probe.mark("idle")
            await asyncio.sleep(IDLE_S)
        if index % step == 0:
            lost = ledger.lost_finals + ledger.lost_commits
            print(f"\r  {index}/{args.cycles} cycles, {time.monotonic() - started:.0f} s, lost {lost}",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    await asyncio.gather(*silent)
    probe.mark("end")
    await asyncio.sleep(IDLE_S)
    async with httpx.AsyncClient(timeout=10) as client:
        series = parse_metrics((await client.get(f"{http}/metrics")).text)
    return {label: metric(series, name) for label, name in LEFTOVER_GAUGES.items()}


def server_overrides(model: str, turn_model: str | None, idle_timeout_s: float | None) -> dict[str, Any]:
    """The soak's server config; ``server.idle_timeout_s`` only when asked for, so the tool still
    runs a server that predates the key."""
    overrides: dict[str, Any] = {"turn": {"model": turn_model or None}, "asr": {"model": model}}
    if idle_timeout_s is not None:
        overrides["server"] = {"idle_timeout_s": idle_timeout_s}
    return overrides


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--floor-after", type=int, help="cycles before the idle floor is taken "
                                                        "(default: 50, or half of fewer than 100 cycles)")
    parser.add_argument("--model", default="tone", help="asr.model of the server")
    parser.add_argument("--wav", type=Path, help="speech to send (16 kHz mono WAV) instead of tone speech")
    parser.add_argument("--abuse", action="store_true", help="add malformed frames, floods and silent connections")
    parser.add_argument("--flood-s", type=float, default=1.0, help="length of each --abuse flood")
    parser.add_argument("--idle-timeout-s", type=float,
                        help="set server.idle_timeout_s and require the server to close silent connections")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a session's commits later than this are lost")
    parser.add_argument("--seed", type=int, default=0, help="seed of the malformed frames")
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    if args.floor_after is None:
        args.floor_after = 50 if args.cycles >= 100 else max(1, args.cycles // 2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SOAK_TURN_MODEL= (empty) runs without the end-of-turn model
    overrides = server_overrides(args.model, os.environ.get("SOAK_TURN_MODEL", "turnsense"), args.idle_timeout_s)
    pcm = read_wav_16k_mono(args.wav).tobytes() if args.wav else tone_pcm("打开车门", tail_ms=0)
    ledger = Ledger()
    with bench_server(overrides, "soak-") as server:
        probe = MemoryProbe(server.process.pid).start()
        try:
            leftovers = asyncio.run(soak(server.url, server.http, probe, args, pcm, ledger))
        finally:
            probe.stop()
    print_report(args, ledger, leftovers, probe)
    problems = ledger.problems(leftovers, args.idle_timeout_s)
    print("RESULT: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 1 if problems else 0


def print_report(args: argparse.Namespace, ledger: Ledger, leftovers: dict[str, float | None],
                 probe: MemoryProbe) -> None:
    def counts(counter: Counter[str]) -> str:
        return ", ".join(f"{key} {value}" for key, value in counter.most_common()) or "none"

    mode = f" (abuse: normal + malformed frames + {args.flood_s:g} s flood + silent connection per cycle)" \
        if args.abuse else ""
    print(f"cycles: {args.cycles}{mode}")
    print(f"sessions: {counts(ledger.sessions)}; refused: {counts(ledger.refused)}")
    print(f"speech starts {ledger.speech_starts}, finals {ledger.finals}: lost {ledger.lost_finals}, duplicate "
          f"{ledger.duplicate_finals}, without speech_start {ledger.orphan_finals}; lost commits {ledger.lost_commits}")
    if args.abuse:
        print(f"malformed frames: {ledger.fuzz_sent} sent (+{ledger.fuzz_uncertain} valid or of undefined outcome), "
              f"{ledger.fuzz_answers} error frames back before the pong")
        print(flood_summary(ledger.flood))
        closing = ""
        if ledger.silent_close_s:
            closing = (f"; closed by the server after {statistics.median(ledger.silent_close_s):.1f} s median, "
                       f"{max(ledger.silent_close_s):.1f} s max")
        print(f"silent connections: {counts(ledger.silent)}{closing}")
    for kind, errors in sorted(ledger.errors.items()):
        print(f"error frames on {kind} connections: {counts(errors)}")
    for problem in ledger.broken:
        print(f"  {problem}")
    print("after the soak: " + ", ".join(f"{label} {'?' if value is None else f'{value:.0f}'}"
                                         for label, value in leftovers.items()))
    floor, end = probe.floor(phase="idle"), probe.floor(phase="end")
    if floor and end:
        print(f"RSS floor after {args.floor_after} cycles: {floor / 1024:.1f} MiB; at the end: {end / 1024:.1f} MiB; "
              f"end/floor = {end / floor:.3f} (target <= 1.05)")
    print(f"USS floor {probe.floor('uss_kb', 'idle')} kB, end {probe.floor('uss_kb', 'end')} kB; "
          f"samples {len(probe.samples)}, pid reused: {probe.reused}")


if __name__ == "__main__":
    sys.exit(main())
