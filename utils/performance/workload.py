"""Workload harness: many seats speaking at once, paced like real clients, measured per seat.

Each round, every seat of every connection starts together: 2 s of silence (pre-roll), then an
utterance of the chosen length built by repeating a phrase with natural pauses, sent as 20 ms
frames on absolute deadlines (the pacing error of every frame is recorded), then ``vad stop``.
A seat count above what one connection may hold (``server.max_seats``) is spread over several
connections (``split_seats``, ``run_plan``). Per seat and round one row:
``client_final_latency_ms`` (vad stop sent -> the last final received),
``server_latency_ms`` (from the final), ``eot_latency_ms`` (vad stop sent -> commit received),
interim count, text, and delivery checks: one final per ``speech_start``, the expected text (tone phrases),
nothing from another seat, a commit received.  Warm-up rounds are recorded with ``warmup: true``
and left out of the summary.  Percentiles are nearest rank.

    python utils/performance/workload.py --url ws://127.0.0.1:8000/stt/sensevoice \\
        --seats 4 --lengths 3 15 30 --rounds 3 --warmup 1 --out rows.jsonl
    python utils/performance/workload.py --url ... --self-check
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.client.session import SttSession, connect  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402
from kitt_stt.pipeline.text_join import join_texts  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402

FRAME_MS = 20
FRAME_BYTES = 640
PREROLL_MS = 2000
START_DELAY_S = 0.3  # time for every seat to be ready before the synchronised start


@dataclass
class Row:
    round: int
    warmup: bool
    connection: int
    seat: str
    length_s: float
    audio_ms: int
    client_final_latency_ms: float | None = None
    server_latency_ms: float | None = None
    eot_latency_ms: float | None = None
    interims: int = 0
    speech_starts: int = 0
    finals: int = 0
    text: str = ""
    expected_text: str | None = None
    commit_reason: str | None = None
    pacing_error_ms_p95: float = 0.0
    pacing_error_ms_max: float = 0.0
    foreign_frames: int = 0
    checks: dict[str, bool] = field(default_factory=dict)


def build_utterance(length_s: float, phrase: str | None, wav: Path | None, pause_ms: int) -> tuple[bytes, str | None]:
    """Repeat the phrase (tone text or a WAV) with ``pause_ms`` pauses up to ``length_s``."""
    if wav is not None:
        unit = read_wav_16k_mono(wav)
        expected_unit = None
    else:
        text = phrase or "打开车门"
        unit = (synthesize(text, ToneStyle()) * 32767).astype(np.int16)
        expected_unit = text
    pause = np.zeros(pause_ms * 16, dtype=np.int16)
    target = int(length_s * 16000)
    pieces, repeats, total = [], 0, 0
    while total + unit.shape[0] <= target or repeats == 0:
        if repeats:
            pieces.append(pause)
            total += pause.shape[0]
        pieces.append(unit)
        total += unit.shape[0]
        repeats += 1
    audio = np.concatenate(pieces)
    audio = np.concatenate([audio, np.zeros((-audio.shape[0]) % (FRAME_BYTES // 2), dtype=np.int16)])
    return audio.astype("<i2").tobytes(), (expected_unit * repeats if expected_unit else None)


async def speak(session: SttSession, seat: str, pcm: bytes, start_at: float, row: Row,
                speech_ended: Callable[[float], None], server_vad_tail_ms: int | None = None) -> None:
    """Send pre-roll + utterance on absolute deadlines, then end the speech: ``vad stop``, or with
    ``server_vad_tail_ms`` that much silence in real time, for the server's VAD to end it itself.
    ``speech_ended`` is told when the speech ended (the stop, or the last frame of speech)."""
    frames = [bytes(FRAME_BYTES)] * (PREROLL_MS // FRAME_MS)
    frames += [pcm[i : i + FRAME_BYTES] for i in range(0, len(pcm), FRAME_BYTES)]
    speech_frames = len(frames)
    if server_vad_tail_ms is not None:
        frames += [bytes(FRAME_BYTES)] * (server_vad_tail_ms // FRAME_MS)
    errors = []
    for index, frame in enumerate(frames):
        deadline = start_at + index * FRAME_MS / 1000.0
        delay = deadline - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if index == speech_frames:
            speech_ended(deadline)  # the last speech frame's 20 ms are over
        errors.append((time.monotonic() - deadline) * 1000.0)
        await session.send_audio(frame, seat=seat)
    if server_vad_tail_ms is None:
        await session.vad("stop", seat=seat)
        speech_ended(time.monotonic())
    row.pacing_error_ms_p95 = float(nearest_rank(errors, 95) or 0.0)
    row.pacing_error_ms_max = float(max(errors))


async def run_connection(url: str, connection: int, seats: int, pcm: bytes, expected: str | None, length_s: float,
                         round_index: int, warmup: bool, start_at: float, timeout_s: float,
                         server_vad_tail_ms: int | None = None) -> list[Row]:
    names = [f"seat{index}" for index in range(seats)]
    rows = {name: Row(round_index, warmup, connection, name, length_s, len(pcm) // 32, expected_text=expected)
            for name in names}
    stop_times: dict[str, float] = {}
    done = {name: asyncio.Event() for name in names}
    async with connect(url) as session:
        await session.start(arbitration=False)  # every seat speaks the same audio: a load, not one voice

        async def receive() -> None:
            while not all(event.is_set() for event in done.values()):
                frame = await session.receive()
                now = time.monotonic()
                seat = frame.get("seat")
                row = rows.get(seat) if seat else None
                if row is None:
                    if seat is not None:
                        for other in rows.values():
                            other.foreign_frames += 1
                    continue
                if frame["type"] == "interim":
                    row.interims += 1
                elif frame["type"] == "speech_start":
                    row.speech_starts += 1
                elif frame["type"] == "final":
                    row.finals += 1
                    row.text = join_texts([row.text, frame["text"]])
                    row.server_latency_ms = frame["server_latency_ms"]
                    if seat in stop_times:  # the final that came after the speech ended
                        row.client_final_latency_ms = (now - stop_times[seat]) * 1000.0
                elif frame["type"] == "commit":
                    row.commit_reason = frame["metadata"]["eot"]["decision"]["reason"]
                    if seat in stop_times:
                        row.eot_latency_ms = (now - stop_times[seat]) * 1000.0
                    done[seat].set()

        receiver = asyncio.create_task(receive())

        async def one(name: str) -> None:
            await speak(session, name, pcm, start_at, rows[name],
                        lambda at: stop_times.__setitem__(name, at), server_vad_tail_ms)

        await asyncio.gather(*(one(name) for name in names))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(receiver, timeout_s)
    for row in rows.values():
        row.checks = {
            # the server's VAD ends a segment at every pause of vad.silence_ms (also before a
            # client's `vad stop`, which this harness sends without a `vad start`): one final per
            # speech_start, none lost or duplicated
            "one_final_per_segment": row.finals == row.speech_starts >= 1,
            # segments (and chunks) of Latin tone text join with spaces; the tone words have none
            "text": row.expected_text is None or row.text.replace(" ", "") == row.expected_text,
            "no_foreign_frames": row.foreign_frames == 0,
            "commit": row.commit_reason is not None,
        }
    return list(rows.values())


def split_seats(total: int, max_per_connection: int) -> list[int]:
    """Seats per connection for ``total`` seats on a server that allows ``max_per_connection`` on one
    connection (server.max_seats; more are refused with ``too_many_seats``): as few connections as
    that allows, the seats spread evenly over them."""
    if total < 1 or max_per_connection < 1:
        raise ValueError(f"need at least one seat and one seat per connection, not {total} / {max_per_connection}")
    connections = math.ceil(total / max_per_connection)
    base, extra = divmod(total, connections)
    return [base + 1] * extra + [base] * (connections - extra)


async def run_workload(url: str, seats: int, connections: int, lengths: list[float], rounds: int, warmup: int,
                       phrase: str | None, wav: Path | None, pause_ms: int, progress: bool = True,
                       server_vad_tail_ms: int | None = None) -> list[Row]:
    """``connections`` connections of ``seats`` seats each, all speaking at once."""
    return await run_plan(url, [seats] * connections, lengths, rounds, warmup, phrase, wav, pause_ms, progress,
                          server_vad_tail_ms)


async def run_plan(url: str, plan: list[int], lengths: list[float], rounds: int, warmup: int,
                   phrase: str | None, wav: Path | None, pause_ms: int, progress: bool = True,
                   server_vad_tail_ms: int | None = None) -> list[Row]:
    """One connection per entry of ``plan`` with that many seats (``split_seats``), all speaking at once."""
    rows: list[Row] = []
    total = len(lengths) * (rounds + warmup)
    step = 0
    for length_s in lengths:
        pcm, expected = build_utterance(length_s, phrase, wav, pause_ms)
        for round_index in range(warmup + rounds):
            step += 1
            if progress:
                print(f"\r  round {step}/{total} ({length_s:g} s x {sum(plan)} seats)", end="",
                      file=sys.stderr, flush=True)
            start_at = time.monotonic() + START_DELAY_S + 0.5 * len(plan) * 0.01
            timeout = PREROLL_MS / 1000 + length_s + 30
            batches = await asyncio.gather(*(
                run_connection(url, index, seats, pcm, expected, length_s, round_index, round_index < warmup,
                               start_at, timeout, server_vad_tail_ms)
                for index, seats in enumerate(plan)))
            rows.extend(row for batch in batches for row in batch)
    if progress:
        print(file=sys.stderr)
    return rows


def summarise(rows: list[Row]) -> list[dict[str, Any]]:
    summary = []
    for length_s in sorted({row.length_s for row in rows}):
        measured = [row for row in rows if row.length_s == length_s and not row.warmup]

        def stat(name: str, measured: list[Row] = measured) -> tuple[float | None, float | None]:
            values = [getattr(row, name) for row in measured if getattr(row, name) is not None]
            return nearest_rank(values, 50), nearest_rank(values, 95)

        summary.append({
            "length_s": length_s,
            "rows": len(measured),
            "client_final_latency_ms": stat("client_final_latency_ms"),
            "server_latency_ms": stat("server_latency_ms"),
            "eot_latency_ms": stat("eot_latency_ms"),
            "pacing_error_ms_p95": nearest_rank([row.pacing_error_ms_p95 for row in measured], 95),
            "checks_passed": sum(all(row.checks.values()) for row in measured),
        })
    return summary


def print_summary(summary: list[dict[str, Any]]) -> None:
    def pair(values: tuple[float | None, float | None]) -> str:
        return " / ".join("-" if v is None else f"{v:.0f}" for v in values)

    print("| length | rows | client final latency p50 / p95 (ms) | server latency p50 / p95 | "
          "EOT p50 / p95 | pacing error p95 (ms) | checks passed |")
    print("|---|---|---|---|---|---|---|")
    for item in summary:
        pacing = item["pacing_error_ms_p95"]
        print(f"| {item['length_s']:g} s | {item['rows']} | {pair(item['client_final_latency_ms'])} | "
              f"{pair(item['server_latency_ms'])} | {pair(item['eot_latency_ms'])} | "
              f"{'-' if pacing is None else f'{pacing:.1f}'} | {item['checks_passed']}/{item['rows']} |")


def self_check(url: str) -> int:
    """Validate the harness itself on a trivial run: statistics, pacing, rows, delivery checks."""
    problems = []
    one_to_ten = [float(v) for v in range(1, 11)]
    if nearest_rank(one_to_ten, 50) != 5 or nearest_rank(one_to_ten, 95) != 10:
        problems.append("nearest-rank percentiles are wrong on 1..10")
    if nearest_rank([7.0], 95) != 7.0 or nearest_rank([], 50) is not None:
        problems.append("nearest-rank edge cases are wrong")
    pcm, expected = build_utterance(3.0, "AB", None, 300)
    if expected is None or len(pcm) // 32 > 3000 or not expected.startswith("ABAB"):
        problems.append(f"utterance builder: {len(pcm) // 32} ms, expected text {expected!r}")
    rows = asyncio.run(run_workload(url, seats=2, connections=1, lengths=[1.0], rounds=1, warmup=1, phrase="AB",
                                    wav=None, pause_ms=300, progress=False))
    if len(rows) != 4 or sum(row.warmup for row in rows) != 2:
        problems.append(f"expected 2 warm-up + 2 measured rows, got {len(rows)}")
    for row in rows:
        if not all(row.checks.values()):
            problems.append(f"delivery checks failed: {row}")
        if row.pacing_error_ms_p95 > 5.0:
            problems.append(f"pacing error p95 {row.pacing_error_ms_p95:.1f} ms > 5 ms")
        if row.client_final_latency_ms is None or row.client_final_latency_ms < 0:
            problems.append(f"no client final latency in {row}")
    for problem in problems:
        print(f"self-check: {problem}", file=sys.stderr)
    print("self-check: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/stt/sensevoice")
    parser.add_argument("--seats", type=int, default=4, help="seats per connection")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--lengths", type=float, nargs="+", default=[1, 3, 6, 15, 30, 60])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--phrase", default="打开车门", help="tone-language phrase (expected text is known)")
    parser.add_argument("--wav", type=Path, help="a real phrase to repeat instead (16 kHz mono)")
    parser.add_argument("--pause-ms", type=int, default=300, help="pause between repetitions of the phrase")
    parser.add_argument("--out", type=Path, help="raw rows as JSONL")
    parser.add_argument("--self-check", action="store_true")
    args = parser.parse_args()
    if args.self_check:
        return self_check(args.url)
    rows = asyncio.run(run_workload(args.url, args.seats, args.connections, args.lengths, args.rounds, args.warmup,
                                    args.phrase, args.wav, args.pause_ms))
    if args.out:
        args.out.write_text("".join(json.dumps(asdict(row), ensure_ascii=False) + "\n" for row in rows))
    print_summary(summarise(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
