"""What the restricted language step costs inside a real server, per segment, with the shipped settings.

    python utils/performance/lid_server_cost.py [--model whisper-base] [--clips N] [--pad-frames P --zh-bias B]

Streams recordings (``utils/performance/lid_corpus.py``: the fixtures first) in real time into a
real server (config.yaml's asr, vad and interim sections; tracing on) with ``language: auto``,
then reads the trace: per segment, the time of the ``asr.language`` spans against all of its
ASR time (``asr.language`` + ``asr.features`` + ``asr.decode`` + ``asr.postprocess``, over every
interim, chunk and final decode of the segment). Prints the share per segment and its median,
and how often the final's language was right.
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
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.client.session import connect  # noqa: E402
from kitt_stt.models.registry import resolve_model  # noqa: E402
from tests.helpers import collect_until, of_type, run_server, send_pcm, silence  # noqa: E402
from utils.performance.lid_corpus import Recording, load_corpus  # noqa: E402

ASR_STAGES = ("asr.language", "asr.features", "asr.decode", "asr.postprocess")
DETECTION_MS = 20.0  # an asr.language span this long ran the step (a reused guess takes microseconds)


async def _stream(url: str, rec: Recording) -> list[dict[str, Any]]:
    async with connect(url) as session:
        await session.start(language="auto")
        await send_pcm(session, silence(300) + rec.samples.tobytes() + silence(1200), realtime_factor=1.0)
        return await collect_until(session, lambda got: bool(of_type(got, "commit")), timeout=60)


def _segment_times(trace: Path) -> dict[tuple[str, int], dict[str, float]]:
    """Per segment, the milliseconds of each ASR stage, and under "detections" how many
    ``asr.language`` spans ran the step."""
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)
    events = events["traceEvents"] if isinstance(events, dict) else events
    times: dict[tuple[str, int], dict[str, float]] = defaultdict(
        lambda: {**dict.fromkeys(ASR_STAGES, 0.0), "detections": 0.0})
    for event in events:
        if event.get("name") in ASR_STAGES and "segment" in event.get("args", {}):
            args = event["args"]
            segment = times[(str(args.get("session")), int(args["segment"]))]
            segment[event["name"]] += event.get("dur", 0) / 1000.0
            segment["detections"] += event["name"] == "asr.language" and event.get("dur", 0) / 1000.0 >= DETECTION_MS
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--clips", type=int, default=15, help="recordings to stream (fixtures first)")
    parser.add_argument("--pad-frames", type=int, help="instead of asr.whisper.language_pad_frames")
    parser.add_argument("--zh-bias", type=float, help="instead of asr.whisper.language_bias's zh")
    args = parser.parse_args()
    shipped = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    whisper = shipped["asr"]["whisper"]
    if args.pad_frames is not None:
        whisper["language_pad_frames"] = args.pad_frames
    if args.zh_bias is not None:
        whisper["language_bias"] = {"zh": args.zh_bias}
    model = resolve_model(args.model)
    recordings = load_corpus([])[: args.clips]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json.gz"
        overrides = {"asr": {**shipped["asr"], "model": str(model.directory)}, "vad": shipped["vad"],
                     "interim": shipped["interim"], "turn": {"model": None},
                     "tracing": {"enabled": True, "path": str(trace), "flush_interval_s": 1.0}}
        right = 0
        with run_server(Path(tmp), model.directory.parent, overrides) as server:
            for rec in recordings:
                finals = of_type(asyncio.run(_stream(server.url, rec)), "final")
                langs = [final["lang"] for final in finals if final["text"]]
                right += bool(langs) and all(lang == rec.lang for lang in langs)
                print(f"{rec.source}:{rec.name} ({rec.lang}): "
                      + "; ".join(f"{f['lang']} {f['lang_probability']} {f['text']!r}" for f in finals), flush=True)
            time.sleep(2.5)  # one more flush of the trace
        times = _segment_times(trace)
    totals = {key: sum(parts[stage] for stage in ASR_STAGES) for key, parts in times.items()}
    shares = [parts["asr.language"] / totals[key] for key, parts in times.items() if totals[key] > 0]
    detections = [parts["detections"] for parts in times.values()]
    print(f"\n{len(shares)} segments: language step = median {statistics.median(shares):.1%}, mean "
          f"{statistics.mean(shares):.1%} of the segment's ASR time; {statistics.mean(detections):.2f} detections "
          f"per segment (spans >= {DETECTION_MS:.0f} ms); finals in the right language: {right}/{len(recordings)}")


if __name__ == "__main__":
    main()
