"""Flood bench: can one client that floods segment starts deny service to another? (issue 11)

Starts a real server and measures a VICTIM connection that speaks like a person: one seat, a
phrase streamed in real time (20 ms frames on absolute deadlines) with the server's VAD (no
``vad`` frames), then silence until the segment ends; ``--utterances`` per phase.

1. ``unflooded``: the victim alone (the baseline).
2. ``flooded``: a FLOODER connection on ``--flood-seats`` seats sends, per seat and as fast as it
   can, ``vad start``, one 20 ms frame of the same speech, ``vad stop``, ``finalize`` (every such
   group opens a segment the server must decode), reading and counting everything that comes
   back so it is not closed as a slow consumer; the victim speaks again meanwhile.  The flooder
   is a separate process so its busy loop cannot delay the victim's pacing or timestamps here.
3. ``after``: the flood has stopped; the victim again at once (issue 11 saw no final for 30 s
   after a flood ended).

Victim final latency = final received - last voiced frame of the utterance sent; it includes the
server VAD's ``vad.silence_ms`` (500 ms) wait, so it is reported next to the final's own
``server_latency_ms`` (end of segment -> final queued).  A final later than ``--timeout-s``
counts as lost; nothing waits longer.  Also reported: what the flooder received (by type, errors
by code, how its connections ended), server RSS (start, max during the flood, end) and the
scheduler queue depth from /metrics, and live sessions / seats / buffered bytes at the end.
Exit status 1 when a victim final was lost or final-latency p95 flooded / unflooded exceeds
``--target-ratio``, so the same command checks a fix.

    python utils/performance/flood_bench.py                    # whisper-base, real speech, 8 utterances
    python utils/performance/flood_bench.py --model tone --utterances 3
    python utils/performance/flood_bench.py --set server.max_pending_decodes=4 --set asr.max_queue=64

The server runs the production audio rate limit (4x real time, 10 s burst: a flooder meets what
a deployed server would apply; ``--realtime-factor`` / ``--burst-ms`` change it) and interims as
in ``config.yaml``; anything else can be set with ``--set KEY.PATH=YAML``.  On a machine with few
cores the flooder process competes with the server for CPU; ``--flooder-nice 10`` separates
the server's fairness from that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402
from tests.helpers import deep_merge  # noqa: E402
from utils.performance.memory_probe import MemoryProbe  # noqa: E402
from utils.performance.speech import trim_silence  # noqa: E402
from utils.performance.toolkit.flooder import FloodCounts, flood, flood_summary, loudest_frame  # noqa: E402
from utils.performance.toolkit.prometheus import MetricsPoller, labelled, metric, parse_metrics  # noqa: E402
from utils.performance.toolkit.server import bench_server, parse_set  # noqa: E402
from utils.performance.toolkit.stats import ms, nearest_rank, ratio, triple  # noqa: E402
from utils.performance.toolkit.tables import markdown_table  # noqa: E402
from utils.performance.toolkit.victim import PhaseResult, VictimPlan, build_plan, run_victim  # noqa: E402

DEFAULT_WAV = REPO / "tests/fixtures/speech/en_open_the_car_door_please.wav"
TONE_PHRASE = "打开车门"


# ----- configuration ------------------------------------------------------------------------------


def server_overrides(model: str, turn_model: str | None, realtime_factor: float, burst_ms: int,
                     extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Server config on top of ``tests.helpers.TEST_CONFIG``: the production VAD, interim and rate
    limit (the test config's are tuned for fast tests and a 200x rate limit no deployment has)."""
    overrides: dict[str, Any] = {
        "asr": {"model": model},
        "turn": {"model": turn_model or None},
        "vad": {"silence_ms": 500},
        "interim": {"start_ms": 1000, "min_interval_ms": 1000},
        "server": {"rate_limit": {"realtime_factor": realtime_factor, "burst_ms": burst_ms}},
    }
    for item in extra or []:
        overrides = deep_merge(overrides, item)
    return overrides


def load_phrase(model: str, wav: Path | None) -> tuple[np.ndarray, str | None]:
    """The victim's phrase with its silence trimmed, and the text expected when it is known.

    The tone model gets tone speech (exact text expected); any other model real speech, by
    default the repository's recording of "open the car door please"."""
    if wav is None and model == "tone":
        spoken = (synthesize(TONE_PHRASE, ToneStyle()) * 32767).astype("<i2")
        return trim_silence(spoken), TONE_PHRASE
    return trim_silence(read_wav_16k_mono(wav or DEFAULT_WAV)), None


# ----- the flooder process ------------------------------------------------------------------------


def flooder_main(args: argparse.Namespace) -> int:
    """The ``--flooder URL`` process: floods until its stdin closes (or ``--max-flood-s``), then
    prints its counts as one JSON line.  Stdin EOF also ends it if the bench itself dies."""
    if args.flooder_nice:
        os.nice(args.flooder_nice)
    phrase, _ = load_phrase(args.model, args.wav)
    closed = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.buffer.read()
        closed.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    deadline = time.monotonic() + args.max_flood_s
    counts = FloodCounts()
    asyncio.run(flood(args.flooder, args.flood_seats, loudest_frame(phrase),
                      lambda: closed.is_set() or time.monotonic() > deadline, counts, progress=True))
    print(json.dumps(counts.as_dict()), flush=True)
    return 0


class Flooder:
    """The flooder process, seen from the bench."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--flooder", url, "--model", args.model,
                   "--flood-seats", str(args.flood_seats), "--max-flood-s", str(args.max_flood_s),
                   "--flooder-nice", str(args.flooder_nice)]
        if args.wav:
            command += ["--wav", str(args.wav)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def stop(self) -> FloodCounts:
        try:  # communicate() closes the flooder's stdin: that EOF is its signal to stop
            out, _ = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            return FloodCounts.from_dict(json.loads(lines[-1]))
        except (IndexError, json.JSONDecodeError):
            counts = FloodCounts()
            counts.ended[f"flooder exited {self.process.returncode} without counts"] += 1
            return counts


# ----- report -------------------------------------------------------------------------------------


def phase_table(phases: list[PhaseResult]) -> str:
    rows = []
    for phase in phases:
        texts = Counter(u.text for u in phase.on_time())
        shown = ", ".join(f"{text!r} x{count}" for text, count in texts.most_common(2)) or "-"
        errors = ", ".join(f"{code} {count}" for code, count in sorted(phase.errors.items())) or "-"
        rows.append([phase.phase, f"{phase.received}/{len(phase.utterances)}", triple(phase.latencies()),
                     triple(phase.server_latencies()), f"{phase.lost} ({phase.late})", errors, shown])
    return markdown_table(["phase", "victim finals / expected", "final latency p50 / p95 / max (ms)",
                           "server_latency_ms p50 / p95 / max", "lost (late)", "victim errors", "texts"], rows)


def verdict(phases: dict[str, PhaseResult], target_ratio: float) -> list[str]:
    """Why the run fails (empty: it passes): lost victim finals, p95 ratio over the target."""
    problems = [f"{p.phase}: {p.lost} victim finals lost" for p in phases.values() if p.lost]
    problems += [f"{p.phase}: {p.wrong_texts} wrong texts" for p in phases.values() if p.wrong_texts]
    base, flooded = phases.get("unflooded"), phases.get("flooded")
    if base and flooded:
        value = ratio(nearest_rank(flooded.latencies(), 95), nearest_rank(base.latencies(), 95))
        if value is not None and value > target_ratio:
            problems.append(f"final latency p95 flooded / unflooded {value:.2f} > {target_ratio}")
    return problems


# ----- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="whisper-base", help="asr.model of the server (whisper-base, tone, ...)")
    parser.add_argument("--wav", type=Path, help=f"the victim's phrase (16 kHz mono WAV); default: tone speech on "
                                                 f"the tone model, else {DEFAULT_WAV.relative_to(REPO)}")
    parser.add_argument("--utterances", type=int, default=8, help="victim utterances per phase")
    parser.add_argument("--gap-ms", type=int, default=1500, help="silence after each utterance (> vad.silence_ms)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a victim final later than this is lost")
    parser.add_argument("--flood-seats", type=int, default=8)
    parser.add_argument("--flood-lead-s", type=float, default=2.0, help="flood alone before the victim speaks")
    parser.add_argument("--max-flood-s", type=float, default=600.0, help="the flooder stops by itself after this")
    parser.add_argument("--flooder-nice", type=int, default=0, help="niceness of the flooder process")
    parser.add_argument("--no-after", action="store_true", help="skip the phase after the flood")
    parser.add_argument("--language", help="victim session language (default: the server's)")
    parser.add_argument("--turn-model", default="", help="turn.model (default none: silence timeout)")
    parser.add_argument("--realtime-factor", type=float, default=4.0, help="server.rate_limit.realtime_factor")
    parser.add_argument("--burst-ms", type=int, default=10_000, help="server.rate_limit.burst_ms")
    parser.add_argument("--set", dest="sets", type=parse_set, action="append", default=[], metavar="KEY.PATH=YAML",
                        help="any other server setting, e.g. server.max_pending_decodes=4 (repeatable)")
    parser.add_argument("--target-ratio", type=float, default=2.0, help="max final latency p95 flooded / unflooded")
    parser.add_argument("--flooder", metavar="URL", help=argparse.SUPPRESS)  # internal: be the flooder process
    args = parser.parse_args(argv)
    if args.utterances < 1:
        parser.error("--utterances must be at least 1")
    return args


async def _phase(url: str, name: str, plan: VictimPlan, args: argparse.Namespace, probe: MemoryProbe,
                 poller: MetricsPoller) -> PhaseResult:
    print(f"phase {name}: {len(plan.starts)} utterances ...", file=sys.stderr, flush=True)
    probe.mark(name)
    poller.mark(name)
    return await run_victim(url, name, plan, args.timeout_s, args.language)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.flooder:
        return flooder_main(args)
    phrase, expected = load_phrase(args.model, args.wav)
    plan = build_plan(phrase, args.utterances, args.gap_ms, expected)
    overrides = server_overrides(args.model, args.turn_model, args.realtime_factor, args.burst_ms, args.sets)
    phases: dict[str, PhaseResult] = {}
    counts = FloodCounts()
    with bench_server(overrides, "flood-bench-") as server:
        print(f"server ready on {server.url} (model {args.model}); phrase {phrase.shape[0] / 16:.0f} ms",
              file=sys.stderr, flush=True)
        probe = MemoryProbe(server.process.pid).start()
        poller = MetricsPoller(server.http).start()
        probe.mark("idle")
        time.sleep(1.5)
        try:
            phases["unflooded"] = asyncio.run(_phase(server.url, "unflooded", plan, args, probe, poller))
            print(f"phase flooded: flooder on {args.flood_seats} seats, victim after {args.flood_lead_s:g} s",
                  file=sys.stderr, flush=True)
            probe.mark("flooded")
            poller.mark("flooded")
            flooder = Flooder(server.url, args)
            try:
                time.sleep(args.flood_lead_s)
                phases["flooded"] = asyncio.run(_phase(server.url, "flooded", plan, args, probe, poller))
            finally:
                counts = flooder.stop()
            if not args.no_after:
                phases["after"] = asyncio.run(_phase(server.url, "after", plan, args, probe, poller))
            probe.mark("end")
            poller.mark("end")
            time.sleep(2.0)
        finally:
            poller.stop()
            probe.stop()
        alive = server.process.poll() is None
        final: dict[str, float] = {}
        with contextlib.suppress(httpx.HTTPError):
            final = parse_metrics(httpx.get(f"{server.http}/metrics", timeout=5).text)
    print_report(args, list(phases.values()), phases, counts, probe, poller, final, alive)
    problems = verdict(phases, args.target_ratio)
    if not alive:
        problems.append("the server process died")
    leftovers = {name: metric(final, name) for name in ("kitt_live_sessions", "kitt_seats", "kitt_buffered_bytes")}
    problems += [f"{name} = {value:.0f} after the run" for name, value in leftovers.items() if value]
    print("RESULT: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 1 if problems else 0


def print_report(args: argparse.Namespace, ordered: list[PhaseResult], phases: dict[str, PhaseResult],
                 counts: FloodCounts, probe: MemoryProbe, poller: MetricsPoller, final: dict[str, float],
                 alive: bool) -> None:
    print(f"model {args.model}, {args.utterances} utterances per phase, flooder on {args.flood_seats} seats, "
          f"timeout {args.timeout_s:g} s")
    print(phase_table(ordered))
    print()
    base = phases.get("unflooded")
    for name in ("flooded", "after"):
        other = phases.get(name)
        if base is None or other is None:
            continue
        client = ratio(nearest_rank(other.latencies(), 95), nearest_rank(base.latencies(), 95))
        server_side = ratio(nearest_rank(other.server_latencies(), 95), nearest_rank(base.server_latencies(), 95))
        target = f" (target <= {args.target_ratio:g})" if name == "flooded" else ""
        print(f"p95 {name} / unflooded: final latency {'-' if client is None else f'{client:.2f}'}{target}; "
              f"server_latency_ms {'-' if server_side is None else f'{server_side:.2f}'}")
    for phase in ordered:
        if phase.note:
            print(f"{phase.phase}: {phase.note}")
    print(flood_summary(counts))
    summary = probe.summary()
    flooded = summary.get("flooded")
    peak = flooded.get("rss_kb_max") if isinstance(flooded, dict) else None
    start, end = probe.floor(phase="idle"), probe.floor(phase="end")

    def mib(kb: object) -> str:
        return "-" if not isinstance(kb, (int, float)) else f"{kb / 1024:.1f} MiB"

    print(f"server RSS: at start {mib(start)}, max during the flood {mib(peak)}, at the end {mib(end)}"
          + ("" if alive else " (the server process died)"))
    depths = ", ".join(f"{name} {ms(poller.queue_depth_max(name))}" for name in ("unflooded", "flooded", "after")
                       if name in phases)
    names = ", ".join(poller.queue_depth_names()) or "no *queue_depth metric"
    print(f"queue depth max ({names}): {depths}; /metrics scrapes {len(poller.samples)}, failed {poller.failures}")
    errors = labelled(final, "kitt_errors_total", "code")
    print("server error frames by code: " + (", ".join(f"{code} {value:.0f}" for code, value in sorted(errors.items()))
                                             or "none"))
    print("after the run: " + ", ".join(f"{label} {ms(metric(final, name))}" for label, name in (
        ("live sessions", "kitt_live_sessions"), ("seats", "kitt_seats"), ("buffered bytes", "kitt_buffered_bytes"))))


if __name__ == "__main__":
    sys.exit(main())
