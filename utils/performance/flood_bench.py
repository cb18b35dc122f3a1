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
import bisect
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import websockets
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.client.session import connect, decode  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402
from tests.helpers import FRAME_BYTES, deep_merge, frames_of, run_server  # noqa: E402
from utils.performance.memory_probe import MemoryProbe, PhasedSampler  # noqa: E402
from utils.performance.speech import trim_silence  # noqa: E402
from utils.performance.workload import nearest_rank  # noqa: E402

FRAME_MS = 20
DEFAULT_WAV = REPO / "tests/fixtures/speech/en_open_the_car_door_please.wav"
TONE_PHRASE = "打开车门"
VICTIM_SEAT = "driver"
LEAD_MS = 1000  # silence before the first utterance: the VAD's pre-roll and noise floor settle
METRICS_INTERVAL_S = 0.5


# ----- configuration ------------------------------------------------------------------------------


def parse_set(item: str) -> dict[str, Any]:
    """``server.max_pending_decodes=4`` -> ``{"server": {"max_pending_decodes": 4}}`` (value as YAML),
    so settings the server may or may not know yet can be tried without editing this tool."""
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise argparse.ArgumentTypeError(f"expected KEY.PATH=VALUE, got {item!r}")
    value: Any = yaml.safe_load(raw)
    for part in reversed(parts):
        value = {part: value}
    return value


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


def loudest_frame(samples: np.ndarray) -> bytes:
    """The 20 ms frame with the most energy: voiced for any VAD, so every flood group is speech."""
    usable = samples[: samples.shape[0] // (FRAME_BYTES // 2) * (FRAME_BYTES // 2)].astype(np.float64)
    if usable.size == 0:
        raise ValueError("the phrase is shorter than one 20 ms frame")
    energy = (usable.reshape(-1, FRAME_BYTES // 2) ** 2).sum(axis=1)
    best = int(np.argmax(energy))
    return samples[best * (FRAME_BYTES // 2):(best + 1) * (FRAME_BYTES // 2)].astype("<i2").tobytes()


# ----- the victim ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class VictimPlan:
    """Every frame the victim sends in one phase, and where each utterance's speech is."""

    frames: list[bytes]
    starts: list[int]  # frame index where each utterance's phrase begins
    last_voiced: list[int]  # frame index of each utterance's last voiced frame
    expected_text: str | None

    @property
    def starts_ms(self) -> list[int]:
        return [index * FRAME_MS for index in self.starts]


def build_plan(phrase: np.ndarray, utterances: int, gap_ms: int, expected_text: str | None = None,
               lead_ms: int = LEAD_MS) -> VictimPlan:
    """Lead silence, then ``utterances`` x (phrase + ``gap_ms`` silence), cut into 20 ms frames."""
    phrase_frames = frames_of(phrase.astype("<i2").tobytes())
    silent = bytes(FRAME_BYTES)
    frames = [silent] * (lead_ms // FRAME_MS)
    starts, last_voiced = [], []
    for _ in range(utterances):
        starts.append(len(frames))
        frames.extend(phrase_frames)
        last_voiced.append(len(frames) - 1)
        frames.extend([silent] * (gap_ms // FRAME_MS))
    return VictimPlan(frames, starts, last_voiced, expected_text)


def utterance_of(end_ms: int, starts_ms: list[int]) -> int:
    """Which utterance a final belongs to: the last one that began at or before its ``end_ms``.

    Matching by audio time, not by arrival order, keeps a lost or split final from shifting
    every later latency onto the wrong utterance."""
    return max(0, bisect.bisect_right(starts_ms, end_ms) - 1)


@dataclass
class UtteranceResult:
    index: int
    sent_at: float | None = None  # monotonic: the utterance's last voiced frame was sent
    received_at: float | None = None  # monotonic: its (latest) final arrived
    server_latency_ms: float | None = None
    finals: int = 0
    text: str = ""

    @property
    def latency_ms(self) -> float | None:
        if self.sent_at is None or self.received_at is None:
            return None
        return (self.received_at - self.sent_at) * 1000.0


@dataclass
class PhaseResult:
    phase: str
    utterances: list[UtteranceResult]
    timeout_s: float
    expected_text: str | None = None
    errors: Counter[str] = field(default_factory=Counter)
    note: str = ""  # why the victim's connection failed, when it did

    def on_time(self) -> list[UtteranceResult]:
        limit = self.timeout_s * 1000.0
        return [u for u in self.utterances if u.latency_ms is not None and u.latency_ms <= limit]

    @property
    def received(self) -> int:
        return len(self.on_time())

    @property
    def lost(self) -> int:
        return len(self.utterances) - self.received

    @property
    def late(self) -> int:
        """Finals that did arrive, but after the timeout (counted in ``lost`` as well)."""
        return sum(1 for u in self.utterances if u.latency_ms is not None) - self.received

    @property
    def wrong_texts(self) -> int:
        if self.expected_text is None:
            return 0
        return sum(1 for u in self.on_time() if u.text != self.expected_text)

    def latencies(self) -> list[float]:
        return [u.latency_ms for u in self.on_time() if u.latency_ms is not None]

    def server_latencies(self) -> list[float]:
        return [u.server_latency_ms for u in self.on_time() if u.server_latency_ms is not None]


async def run_victim(url: str, phase: str, plan: VictimPlan, timeout_s: float, language: str | None) -> PhaseResult:
    """Speak the plan in real time on one seat; never waits more than ``timeout_s`` past the last
    utterance for its final, whatever the server does."""
    result = PhaseResult(phase, [UtteranceResult(index) for index in range(len(plan.starts))], timeout_s,
                         plan.expected_text)
    voiced_end = {frame: index for index, frame in enumerate(plan.last_voiced)}
    starts_ms = plan.starts_ms
    all_in = asyncio.Event()
    total = len(result.utterances)

    async def receive(session: Any) -> None:
        try:
            async for frame in session.frames():
                now = time.monotonic()
                kind = frame.get("type")
                if kind == "error":
                    result.errors[str(frame.get("code"))] += 1
                elif kind == "final" and frame.get("seat") == VICTIM_SEAT:
                    utterance = result.utterances[utterance_of(int(frame.get("end_ms") or 0), starts_ms)]
                    utterance.finals += 1
                    if utterance.sent_at is None:  # a pause inside the phrase split it: wait for the tail's final
                        print(f"  {phase}: utterance {utterance.index + 1}/{total}: a final before its speech "
                              f"ended: {frame.get('text')!r}", file=sys.stderr, flush=True)
                        continue
                    utterance.received_at = now
                    utterance.server_latency_ms = frame.get("server_latency_ms")
                    utterance.text = str(frame.get("text", ""))
                    latency = utterance.latency_ms
                    late = " LATE: counted as lost" if latency is not None and latency > timeout_s * 1000 else ""
                    print(f"  {phase}: utterance {utterance.index + 1}/{total}: final after "
                          f"{'?' if latency is None else f'{latency:.0f}'} ms (server "
                          f"{utterance.server_latency_ms or 0:.0f} ms) {utterance.text!r}{late}",
                          file=sys.stderr, flush=True)
                    if all(u.received_at is not None for u in result.utterances):
                        all_in.set()
        except websockets.ConnectionClosed as exc:
            result.note = result.note or f"victim connection closed: {exc}"

    receiver: asyncio.Task[None] | None = None
    cap_s = len(plan.frames) * FRAME_MS / 1000.0 + timeout_s + 30.0  # bounded whatever the server does
    try:
        async with asyncio.timeout(cap_s), connect(url) as session:
            if language:
                await session.start(language=language, client="flood-bench victim")
            receiver = asyncio.create_task(receive(session))
            started = time.monotonic() + 0.05
            for index, frame in enumerate(plan.frames):
                delay = started + index * FRAME_MS / 1000.0 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await session.send_audio(frame, seat=VICTIM_SEAT)
                if index in voiced_end:
                    result.utterances[voiced_end[index]].sent_at = time.monotonic()
            last_sent = result.utterances[-1].sent_at or time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), max(0.0, last_sent + timeout_s - time.monotonic()))
            await session.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(receiver), 5.0)
    except (OSError, ConnectionError, TimeoutError, websockets.WebSocketException) as exc:
        result.note = result.note or f"victim connection failed: {type(exc).__name__}: {exc}"
    finally:
        if receiver is not None and not receiver.done():
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
    return result


# ----- the flooder (also used by soak.py --abuse) -------------------------------------------------


@dataclass
class FloodCounts:
    connections: int = 0
    refused: int = 0  # sessions the server would not open (an error frame instead of ready)
    groups: int = 0  # vad start + audio + vad stop + finalize, sent on one seat
    seconds: float = 0.0
    received: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)  # "client" or the server's close code

    def as_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "refused": self.refused, "groups": self.groups,
                "seconds": self.seconds, "received": dict(self.received), "errors": dict(self.errors),
                "ended": dict(self.ended)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FloodCounts:
        return cls(int(data.get("connections", 0)), int(data.get("refused", 0)), int(data.get("groups", 0)),
                   float(data.get("seconds", 0.0)), Counter(data.get("received", {})),
                   Counter(data.get("errors", {})), Counter(data.get("ended", {})))


def flood_messages(seats: int, frame: bytes) -> list[list[bytes]]:
    """Per seat, the four messages of one flood group, packed once: packing them on every send
    would make the flooder slower than the server it is meant to outrun."""
    groups = []
    for index in range(seats):
        seat = f"flood{index}"
        groups.append([msgpack.packb(message, use_bin_type=True) for message in (
            {"type": "vad", "seat": seat, "event": "start"},
            {"type": "audio", "seat": seat, "pcm": frame},
            {"type": "vad", "seat": seat, "event": "stop"},
            {"type": "finalize", "seat": seat},
        )])
    return groups


async def _count_frames(websocket: Any, counts: FloodCounts) -> None:
    """Read everything the server sends; a flooder that stopped reading would only be closed as a
    slow consumer, which measures the outbound queue instead of the scheduler."""
    with contextlib.suppress(websockets.ConnectionClosed):
        async for message in websocket:
            try:
                frame = decode(message)
            except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                counts.received["undecodable"] += 1
                continue
            kind = str(frame.get("type"))
            counts.received[kind] += 1
            if kind == "error":
                counts.errors[str(frame.get("code"))] += 1


async def flood_connection(url: str, messages: list[list[bytes]], stop: Callable[[], bool],
                           counts: FloodCounts) -> None:
    """One flooding connection until ``stop()`` or the server closes it; then the transport is
    dropped without ``close`` or a close handshake, as a crashing or hostile client would."""
    websocket = await websockets.connect(url, open_timeout=10, max_size=1 << 22, close_timeout=1)
    reader: asyncio.Task[None] | None = None
    try:
        first = decode(await asyncio.wait_for(websocket.recv(), 10))
        if first.get("type") != "ready":
            counts.refused += 1
            counts.errors[str(first.get("code"))] += 1
            return
        counts.connections += 1
        reader = asyncio.create_task(_count_frames(websocket, counts))
        try:
            while not stop() and not reader.done():
                for group in messages:
                    for message in group:
                        await websocket.send(message)
                counts.groups += len(messages)
                await asyncio.sleep(0)  # let the reader drain what came back
        except websockets.ConnectionClosed:
            pass
        code = websocket.close_code
        counts.ended["client" if code is None else str(code)] += 1
        websocket.transport.abort()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(reader, 2.0)
    finally:  # also when a caller's timeout cancels us mid-send
        websocket.transport.abort()
        if reader is not None:
            reader.cancel()


async def flood(url: str, seats: int, frame: bytes, stop: Callable[[], bool], counts: FloodCounts,
                reconnect: bool = True, progress: bool = False) -> FloodCounts:
    """Flood until ``stop()``; with ``reconnect`` a connection the server closes is replaced, as a
    persistent attacker would do (a refused one is retried after 100 ms)."""
    messages = flood_messages(seats, frame)
    started = time.monotonic()
    reporter = asyncio.create_task(_report_flood(counts, started)) if progress else None
    try:
        while not stop():
            try:
                await flood_connection(url, messages, stop, counts)
            except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                counts.ended[f"connect failed: {type(exc).__name__}"] += 1
            if not reconnect:
                break
            if not stop():
                await asyncio.sleep(0.1)
    finally:
        counts.seconds += time.monotonic() - started  # += : soak.py floods many times into one tally
        if reporter is not None:
            reporter.cancel()
    return counts


async def _report_flood(counts: FloodCounts, started: float) -> None:
    while True:
        await asyncio.sleep(2.0)
        print(f"  flooder: {time.monotonic() - started:.0f} s, {counts.groups} groups sent, "
              f"{counts.received['final']} finals, errors {dict(counts.errors)}", file=sys.stderr, flush=True)


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


# ----- /metrics -----------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> ``{series: value}``, the series written as in the text (``name{labels}``)."""
    series: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            series[name] = float(value)
    return series


def metric(series: dict[str, float], name: str) -> float | None:
    return series.get(name)


def labelled(series: dict[str, float], name: str, label: str) -> dict[str, float]:
    """``kitt_errors_total{code="x"}`` -> ``{"x": value}`` for one label of one metric."""
    found: dict[str, float] = {}
    prefix = name + "{"
    for key, value in series.items():
        if key.startswith(prefix):
            for part in key[len(prefix):-1].split(","):
                label_name, _, label_value = part.partition("=")
                if label_name == label:
                    found[label_value.strip('"')] = found.get(label_value.strip('"'), 0.0) + value
    return found


def queue_depth(series: dict[str, float]) -> tuple[float, list[str]] | None:
    """Sum of every series whose metric name ends in ``queue_depth`` (the scheduler's today; the
    name may change or more may be added): returns the sum and the names it came from."""
    names = sorted(key for key in series if key.split("{")[0].endswith("queue_depth"))
    if not names:
        return None
    return sum(series[name] for name in names), names


class MetricsPoller(PhasedSampler):
    """Scrape /metrics every 500 ms in a thread, labelled with the bench's current phase."""

    def __init__(self, http: str, interval_s: float = METRICS_INTERVAL_S) -> None:
        super().__init__("metrics-poller", interval_s)
        self._url = f"{http}/metrics"
        self.samples: list[tuple[str, dict[str, float]]] = []
        self.failures = 0

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                try:
                    self.samples.append((self._phase, parse_metrics(client.get(self._url).text)))
                except httpx.HTTPError:
                    self.failures += 1
                self._stop.wait(self._interval)

    def queue_depth_max(self, phase: str) -> float | None:
        values = [depth[0] for p, series in self.samples if p == phase and (depth := queue_depth(series))]
        return max(values) if values else None

    def queue_depth_names(self) -> list[str]:
        names: set[str] = set()
        for _, series in self.samples:
            if depth := queue_depth(series):
                names.update(depth[1])
        return sorted(names)


# ----- report -------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def triple(values: list[float]) -> str:
    """``p50 / p95 / max`` (nearest rank), ``-`` where there is nothing to rank."""
    if not values:
        return "- / - / -"
    return f"{_ms(nearest_rank(values, 50))} / {_ms(nearest_rank(values, 95))} / {_ms(max(values))}"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def phase_table(phases: list[PhaseResult]) -> str:
    lines = ["| phase | victim finals / expected | final latency p50 / p95 / max (ms) | "
             "server_latency_ms p50 / p95 / max | lost (late) | victim errors | texts |",
             "|---|---|---|---|---|---|---|"]
    for phase in phases:
        texts = Counter(u.text for u in phase.on_time())
        shown = ", ".join(f"{text!r} x{count}" for text, count in texts.most_common(2)) or "-"
        errors = ", ".join(f"{code} {count}" for code, count in sorted(phase.errors.items())) or "-"
        lines.append(f"| {phase.phase} | {phase.received}/{len(phase.utterances)} | {triple(phase.latencies())} | "
                     f"{triple(phase.server_latencies())} | {phase.lost} ({phase.late}) | {errors} | {shown} |")
    return "\n".join(lines)


def flood_summary(counts: FloodCounts) -> str:
    rate = counts.groups / counts.seconds if counts.seconds else 0.0
    received = ", ".join(f"{kind} {count}" for kind, count in counts.received.most_common()) or "nothing"
    errors = ", ".join(f"{code} {count}" for code, count in counts.errors.most_common()) or "none"
    ended = ", ".join(f"{how} {count}" for how, count in counts.ended.most_common()) or "-"
    return (f"flooder: {counts.connections} connections ({counts.refused} refused), {counts.groups} groups "
            f"(vad start + 20 ms audio + vad stop + finalize on one seat) in {counts.seconds:.1f} s = {rate:.0f}/s\n"
            f"  received: {received}\n  errors by code: {errors}\n  connections ended: {ended}")


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
    from kitt_stt.models.registry import default_cache_dir

    phrase, expected = load_phrase(args.model, args.wav)
    plan = build_plan(phrase, args.utterances, args.gap_ms, expected)
    overrides = server_overrides(args.model, args.turn_model, args.realtime_factor, args.burst_ms, args.sets)
    phases: dict[str, PhaseResult] = {}
    counts = FloodCounts()
    with tempfile.TemporaryDirectory(prefix="flood-bench-") as tmp, \
            run_server(Path(tmp), default_cache_dir(), overrides) as server:
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
    depths = ", ".join(f"{name} {_ms(poller.queue_depth_max(name))}" for name in ("unflooded", "flooded", "after")
                       if name in phases)
    names = ", ".join(poller.queue_depth_names()) or "no *queue_depth metric"
    print(f"queue depth max ({names}): {depths}; /metrics scrapes {len(poller.samples)}, failed {poller.failures}")
    errors = labelled(final, "kitt_errors_total", "code")
    print("server error frames by code: " + (", ".join(f"{code} {value:.0f}" for code, value in sorted(errors.items()))
                                             or "none"))
    print("after the run: " + ", ".join(f"{label} {_ms(metric(final, name))}" for label, name in (
        ("live sessions", "kitt_live_sessions"), ("seats", "kitt_seats"), ("buffered bytes", "kitt_buffered_bytes"))))


if __name__ == "__main__":
    sys.exit(main())
