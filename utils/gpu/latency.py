"""Final latency per provider: latency_report.py's optimised server and workload, on CUDA or TensorRT.

utils/performance/latency_report.py compares the optimised pipeline with the naive one on one
provider; here the pipeline is fixed (optimised) and the provider varies, with the same server
settings, phrase and harness, so its rows and these compare. TensorRT servers load the EP-context
model ``trt build`` wrote into the keyed cache, which the run's ``trt.yaml`` shares with them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

#: server.max_seats of the latency servers: a larger seat count is spread over several connections.
MAX_SEATS = 16


def service_overrides(model_dir: Path, provider: str, trt_cache: Path) -> dict[str, Any]:
    """latency_report.py's optimised server on ``provider`` (and the TensorRT cache of this run)."""
    return {"asr": {"model": str(model_dir), "provider": provider, "tensorrt": {"cache_dir": str(trt_cache)}},
            "vad": {"silence_ms": 500, "max_segment_ms": 90_000},
            "turn": {"model": None, "wait_ms": 300}, "server": {"max_seats": MAX_SEATS}}


def write_phrase(path: Path) -> Path:
    """The tone phrase latency_report.py speaks (pauses long enough to close chunks)."""
    from kitt_stt.audio.wavfile import write_wav_16k_mono
    from kitt_stt.models.tone_synth import ToneStyle, synthesize

    write_wav_16k_mono(path, (synthesize("打开车门关窗", ToneStyle(burst_ms=220, gap_ms=90)) * 32767).astype("<i2"))
    return path


def measure(provider: str, model_dir: Path, trt_cache: Path, work: Path, seats: int,
            lengths: list[float]) -> list[dict[str, Any]]:
    """One server on ``provider``; ``seats`` seats speak each length once; final latency p50/p95."""
    from tests.helpers import run_server
    from utils.performance.workload import nearest_rank, run_plan, split_seats

    phrase = write_phrase(work / "phrase.wav")
    results = []
    with run_server(work, work / "models", service_overrides(model_dir, provider, trt_cache)) as server:
        for length in lengths:
            rows = asyncio.run(run_plan(server.url, split_seats(seats, MAX_SEATS), [length], 1, 0, None, phrase, 450,
                                        progress=False))
            latencies = [row.client_final_latency_ms for row in rows if row.client_final_latency_ms is not None]
            missing = sum(1 for row in rows if row.client_final_latency_ms is None or row.finals != 1)
            results.append({"provider": provider, "seats": seats, "length": length, "rows": len(rows),
                            "missing": missing, "p50": nearest_rank(latencies, 50), "p95": nearest_rank(latencies, 95)})
    return results
