"""What the restricted language step costs inside a real server, per segment, with the shipped settings.

    python utils/performance/lid_server_cost.py [--model whisper-base] [--clips N] [--skip K]
        [--pad-frames P] [--zh-bias B]

Streams recordings (``utils/performance/lid_corpus.py``: the fixtures first) in real time into a
real server (config.yaml's asr, vad and interim sections; tracing on; one session per recording)
with ``language: auto``, then reads the trace: per segment, the time of the ``asr.language`` spans
against all of its ASR time (``asr.language`` + ``asr.features`` + ``asr.decode`` +
``asr.postprocess``, over every interim, chunk and final decode of the segment). Prints the share
per segment (median and mean; over all segments, those shorter than the 1.8 s decision point and
the rest), detections per segment, the finals' ``server_latency_ms``, and how often the final's
language was right. With ``--pad-frames`` or ``--zh-bias``, a second server runs that setting
beside the shipped one, the two alternating recording by recording, so both are measured under
the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.language import DEFAULT_MIN_SAMPLES  # noqa: E402
from kitt_stt.client.session import connect  # noqa: E402
from kitt_stt.models.registry import resolve_model  # noqa: E402
from tests.helpers import collect_until, of_type, run_server, send_pcm, silence  # noqa: E402
from utils.performance.lid_corpus import Recording, load_corpus  # noqa: E402

ASR_STAGES = ("asr.language", "asr.features", "asr.decode", "asr.postprocess")
LONG_MS = DEFAULT_MIN_SAMPLES // 16  # a segment this long (pre-roll included) reaches the decision point
DETECTION_MS = 20.0  # an asr.language span this long ran the step (a reused guess takes microseconds)


async def _stream(url: str, rec: Recording) -> list[dict[str, Any]]:
    async with connect(url) as session:
        await session.start(language="auto")
        await send_pcm(session, silence(300) + rec.samples.tobytes() + silence(1200), realtime_factor=1.0)
        return await collect_until(session, lambda got: bool(of_type(got, "commit")), timeout=60)


def _segment_times(trace: Path) -> dict[tuple[str, int], dict[str, float]]:
    """Per segment, the milliseconds of each ASR stage, under "detections" how many
    ``asr.language`` spans ran the step, and under "first_us" when its first span began."""
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)
    events = events["traceEvents"] if isinstance(events, dict) else events
    times: dict[tuple[str, int], dict[str, float]] = defaultdict(
        lambda: {**dict.fromkeys(ASR_STAGES, 0.0), "detections": 0.0, "first_us": float("inf")})
    for event in events:
        if event.get("name") in ASR_STAGES and "segment" in event.get("args", {}):
            args = event["args"]
            segment = times[(str(args.get("session")), int(args["segment"]))]
            segment[event["name"]] += event.get("dur", 0) / 1000.0
            segment["first_us"] = min(segment["first_us"], float(event.get("ts", 0)))
            segment["detections"] += event["name"] == "asr.language" and event.get("dur", 0) / 1000.0 >= DETECTION_MS
    return times


@dataclass
class Segment:
    """One final's segment: its audio (pre-roll included), the final's server latency, and from
    the trace its language step and all of its ASR time."""

    audio_ms: int
    latency_ms: float
    language_ms: float = 0.0
    asr_ms: float = 0.0
    detections: int = 0


def _segments(finals_per_clip: list[list[dict[str, Any]]], trace: Path) -> list[Segment]:
    """Each final's segment with its trace times. The trace names sessions by id; clips were
    streamed one after another, one session each, so sessions in order of their first span are
    the clips in order."""
    times = _segment_times(trace)
    first: dict[str, float] = {}
    for (session, _segment), parts in times.items():
        first[session] = min(first.get(session, float("inf")), parts["first_us"])
    sessions = sorted(first, key=first.__getitem__)
    segments = []
    for session, finals in zip(sessions, finals_per_clip, strict=False):
        for final in finals:
            parts = times.get((session, int(final["segment_id"])))
            segment = Segment(int(final["timing"]["audio_ms"]), float(final["server_latency_ms"]))
            if parts is not None:
                segment.language_ms = parts["asr.language"]
                segment.asr_ms = sum(parts[stage] for stage in ASR_STAGES)
                segment.detections = int(parts["detections"])
            segments.append(segment)
    return segments


def _summary(label: str, segments: list[Segment]) -> str:
    shares = [seg.language_ms / seg.asr_ms for seg in segments if seg.asr_ms > 0]
    if not shares:
        return f"{label}: no segments"
    latencies = [seg.latency_ms for seg in segments]
    return (f"{label}: {len(shares)} segments, language step = median {statistics.median(shares):.1%}, "
            f"mean {statistics.mean(shares):.1%} of the segment's ASR time; "
            f"{statistics.mean(seg.detections for seg in segments):.2f} detections per segment; "
            f"final latency median {statistics.median(latencies):.0f} ms, mean {statistics.mean(latencies):.0f} ms")


def _run(variants: dict[str, dict[str, Any]], model_dir: Path, shipped: dict[str, Any],
         recordings: list[Recording]) -> dict[str, tuple[list[Segment], int]]:
    """Stream every recording into one server per variant (its ``asr`` section), alternating
    between them clip by clip so that the machine's load falls on all alike; per variant, its
    segments and how many recordings came back with every final in their language."""
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        servers, traces = {}, {}
        for index, (label, asr) in enumerate(variants.items()):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            traces[label] = folder / "trace.json.gz"
            overrides = {"asr": {**asr, "model": str(model_dir)}, "vad": shipped["vad"],
                         "interim": shipped["interim"], "turn": {"model": None},
                         "tracing": {"enabled": True, "path": str(traces[label]), "flush_interval_s": 1.0}}
            servers[label] = stack.enter_context(run_server(folder, model_dir.parent, overrides))
        finals: dict[str, list[list[dict[str, Any]]]] = {label: [] for label in variants}
        right = dict.fromkeys(variants, 0)
        for index, rec in enumerate(recordings):
            order = list(servers.items())
            for label, server in order if index % 2 == 0 else order[::-1]:  # neither always goes first
                got = of_type(asyncio.run(_stream(server.url, rec)), "final")
                finals[label].append(got)
                langs = [final["lang"] for final in got if final["text"]]
                right[label] += bool(langs) and all(lang == rec.lang for lang in langs)
                print(f"[{label}] {rec.source}:{rec.name} ({rec.lang}): " + "; ".join(
                    f"{f['lang']} {f['lang_probability']} {f['timing']['audio_ms']:.0f} ms of audio, final after "
                    f"{f['server_latency_ms']:.0f} ms: {f['text']!r}" for f in got), flush=True)
        time.sleep(2.5)  # one more flush of the traces
        return {label: (_segments(finals[label], traces[label]), right[label]) for label in variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--clips", type=int, default=15, help="recordings to stream (fixtures first)")
    parser.add_argument("--skip", type=int, default=0, help="start at this recording (e.g. 18: the short ones)")
    parser.add_argument("--pad-frames", type=int, help="instead of asr.whisper.language_pad_frames")
    parser.add_argument("--zh-bias", type=float, help="instead of asr.whisper.language_bias's zh")
    args = parser.parse_args()
    shipped = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    asr = shipped["asr"]
    variants = {"shipped": asr}
    whisper = dict(asr["whisper"])
    if args.pad_frames is not None:
        whisper["language_pad_frames"] = args.pad_frames
    if args.zh_bias is not None:
        whisper["language_bias"] = {"zh": args.zh_bias}
    if whisper != asr["whisper"]:  # the other setting, side by side
        variants[f"pad {whisper['language_pad_frames']}, bias {whisper['language_bias']}"] = {**asr, "whisper": whisper}
    model = resolve_model(args.model)
    recordings = load_corpus([])[args.skip : args.skip + args.clips]
    results = _run(variants, model.directory, shipped, recordings)
    print()
    for label, (segments, _right) in results.items():
        print(f"{label}, per segment (audio ms: language ms / ASR ms = share, detections, final latency ms): "
              + ", ".join(f"{seg.audio_ms}: {seg.language_ms:.0f}/{seg.asr_ms:.0f} = "
                          f"{seg.language_ms / max(seg.asr_ms, 1e-9):.0%} x{seg.detections} {seg.latency_ms:.0f}"
                          for seg in segments))
    for label, (segments, right) in results.items():
        print(_summary(f"{label}, all", segments) + f"; finals in the right language: {right}/{len(recordings)}")
        print(_summary(f"{label}, short (< {LONG_MS} ms)", [seg for seg in segments if seg.audio_ms < LONG_MS]))
        print(_summary(f"{label}, long (>= {LONG_MS} ms)", [seg for seg in segments if seg.audio_ms >= LONG_MS]))


if __name__ == "__main__":
    main()
