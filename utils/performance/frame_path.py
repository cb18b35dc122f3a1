"""Where one seat-frame's CPU goes on the server: each stage of the per-frame path timed alone on
the real objects (one 20 ms audio frame of low noise, as the scale run sends), then the whole
in-process path (``Connection``'s decode and dispatch down to the seat's VAD), per detector.

Stages, in the order a frame meets them: msgpack decode and validation (``decode_client_frame``),
the read pacers, the metrics a frame touches, the audio checks (length, ``seq``, rate budget),
the seat's 20 ms cut with the end-of-turn ring and the segmenter (no detector), the front end
(high-pass, level, noise floor), the engine (webrtcvad; Silero on the loop; Silero's batch
thread, per seat-frame at 64 seats a run), and a tracing span (``ws.receive``, when tracing is on).
What the transport costs (uvicorn's WebSocket protocol, starlette's receive, the event loop's
wake-ups) is the scale run's end-to-end CPU per seat-frame (``vad_scale.py``) minus the
in-process path; ``--e2e`` measures it here (16 connections, one server per detector).

    python utils/performance/frame_path.py [--frames 20000] [--e2e --cache ~/.cache/kitt-stt]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.factory import build_engine  # noqa: E402
from kitt_stt.audio.detector import FRAME_SAMPLES  # noqa: E402
from kitt_stt.audio.frontend import HighPassFilter, NoiseFloor, level_db  # noqa: E402
from kitt_stt.audio.silero import SileroDetector, load_silero  # noqa: E402
from kitt_stt.audio.webrtc import WebRtcDetector  # noqa: E402
from kitt_stt.config.schema import AppConfig, VadConfig  # noqa: E402
from kitt_stt.models.registry import default_cache_dir  # noqa: E402
from kitt_stt.observability.metrics import Metrics  # noqa: E402
from kitt_stt.observability.trace import Tracer, Track  # noqa: E402
from kitt_stt.pipeline.admission import Admission  # noqa: E402
from kitt_stt.pipeline.rate_limit import AudioRateLimiter, MessagePacer, TokenBucket  # noqa: E402
from kitt_stt.protocol.codec import decode_client_frame  # noqa: E402
from kitt_stt.protocol.frames import AudioFrame  # noqa: E402
from kitt_stt.scheduler import InferenceScheduler  # noqa: E402
from kitt_stt.server.audio_checks import checked_pcm_bytes  # noqa: E402
from kitt_stt.server.seats import Seats  # noqa: E402
from kitt_stt.server.session_updates import SessionUpdates  # noqa: E402
from kitt_stt.server.state import ServiceState  # noqa: E402
from utils.performance.vad_scale import noise_frames  # noqa: E402

try:  # absent in a checkout from before the batch thread: copied there, this prints the "before"
    from kitt_stt.audio import silero_batch
except ImportError:
    silero_batch = None  # type: ignore[assignment]

BATCH_SEATS = 64


def per_call_us(call: Callable[[Any], object], items: list[Any]) -> float:
    """Mean CPU µs of ``call(item)`` over ``items`` (after one warm pass over the first hundred):
    thread CPU time, not wall time, so that other work on a shared machine is not counted."""
    for item in items[:100]:
        call(item)
    started = time.thread_time()
    for item in items:
        call(item)
    return (time.thread_time() - started) / len(items) * 1e6


def pcm_frames(payloads: list[bytes]) -> list[np.ndarray]:
    return [np.frombuffer(msgpack.unpackb(payload)["pcm"], dtype="<i2") for payload in payloads]


def stages(config: AppConfig, payloads: list[bytes]) -> dict[str, float]:
    """The stages that do not depend on the detector."""
    frames = pcm_frames(payloads)
    decoded = [decode_client_frame(payload) for payload in payloads]
    metrics, pacer, byte_pacer = Metrics(), MessagePacer(10_000), TokenBucket(1e9, 1e9)
    limiter = AudioRateLimiter(config.server.rate_limit)
    tracer, track = Tracer(100_000, 1 << 30), Track(1, 1)

    def checks(frame: AudioFrame) -> None:
        size = checked_pcm_bytes(frame, config.server.max_frame_ms)
        limiter.allow(size / 32.0)
        np.frombuffer(frame.pcm, dtype="<i2")

    def touch_metrics(frame: AudioFrame) -> None:
        metrics.frames_in.labels("audio").inc()
        metrics.audio_seconds.inc(len(frame.pcm) / 32000.0)

    def span(_: object) -> None:
        tracer.add("ws.receive", "ws", tracer.now_us(), 5, track, {"session": "s", "seat": "default", "type": "audio"})

    highpass, floor = HighPassFilter(config.vad.highpass_hz, FRAME_SAMPLES), NoiseFloor(1500, 20)
    heard = [highpass.process(frame) for frame in frames]
    webrtc = WebRtcDetector(config.vad)
    silero = SileroDetector(config.vad, load_silero(Path(config.vad.model)))
    return {
        "msgpack decode + validation": per_call_us(decode_client_frame, payloads),
        "read pacers (messages, bytes)": per_call_us(lambda p: (pacer.delay_for(1.0), byte_pacer.delay_for(len(p))),
                                                     payloads),
        "metrics (frames in, audio seconds)": per_call_us(touch_metrics, decoded),
        "audio checks (length, rate budget)": per_call_us(checks, decoded),
        "front end: high-pass": per_call_us(highpass.process, frames),
        "front end: level + noise floor": per_call_us(lambda h: floor.update(level_db(h)), heard),
        "engine: webrtcvad": per_call_us(webrtc._engine_says_speech, heard),
        "engine: Silero on the loop": per_call_us(silero._engine_says_speech, heard),
        "tracing span (when on)": per_call_us(span, payloads),
    }


def seats_of(config: AppConfig, state: ServiceState) -> Seats:
    updates = SessionUpdates(config, state.engine, "bench")
    return Seats(state, "bench", 0, "bench", lambda: updates.current, lambda _: None,
                 Admission(config, state.scheduler, "bench"))


def whole_path(config: AppConfig, payloads: list[bytes], arm: str) -> dict[str, float]:
    """decode + dispatch + seat (checks, cut, ring, detector, segmenter) per frame, in process."""
    engine = build_engine(config)
    vad = {**config.vad.model_dump(), **silero_arm(arm)}
    arm_config = AppConfig.model_validate({**config.model_dump(), "vad": vad})
    scheduler = InferenceScheduler(engine)
    batcher = silero_batch.build_vad_batch(arm_config.vad) if silero_batch is not None else None
    state = ServiceState(config=arm_config, engine=engine, scheduler=scheduler,
                         **({"vad_batch": batcher} if batcher is not None else {}))
    if batcher is None:
        seats = seats_of(arm_config, state)
        return {"in-process path": per_call_us(lambda p: seats.on_audio(decode_client_frame(p)), payloads)}  # type: ignore[arg-type]
    return asyncio.run(batched_path(arm_config, state, batcher, payloads))


async def batched_path(config: AppConfig, state: ServiceState, batcher: silero_batch.SileroBatcher,
                       payloads: list[bytes]) -> dict[str, float]:
    """64 seats streaming together: the loop's share (hand-over, then the decisions coming back)
    and the batch thread's, per seat-frame."""
    delivered, scored = [0.0], [0.0]
    deliver_all, score = silero_batch._deliver_all, batcher._score

    def timed_deliver(batch: Any) -> None:
        started = time.thread_time()
        deliver_all(batch)
        delivered[0] += time.thread_time() - started

    def timed_score(work: Any) -> Any:
        started = time.thread_time()  # the batch thread's own CPU
        try:
            return score(work)
        finally:
            scored[0] += time.thread_time() - started
    silero_batch._deliver_all = timed_deliver  # type: ignore[assignment]
    batcher._score = timed_score  # type: ignore[method-assign]
    batcher.start()
    connections = [seats_of(config, state) for _ in range(BATCH_SEATS)]
    handed = 0.0
    rounds = len(payloads) // BATCH_SEATS
    try:
        for index in range(rounds):
            started = time.thread_time()
            for seats in connections:
                seats.on_audio(decode_client_frame(payloads[index]))  # type: ignore[arg-type]
            handed += time.thread_time() - started
            await asyncio.sleep(0.002)  # the batch thread scores while the loop waits for sockets
        await asyncio.sleep(0.1)
    finally:
        batcher.stop(2.0)
        silero_batch._deliver_all = deliver_all  # type: ignore[assignment]
    frames = rounds * BATCH_SEATS
    return {"in-process path": (handed + delivered[0]) / frames * 1e6,
            "  of which decisions back on the loop": delivered[0] / frames * 1e6,
            f"batch thread (front end + Silero, {BATCH_SEATS} seats a run)": scored[0] / frames * 1e6,
            "mean batch": batcher.rows / max(1, batcher.runs)}


def silero_arm(arm: str) -> dict[str, Any]:
    """The arm's ``vad`` settings that this checkout knows (an older one has no ``vad.batch``)."""
    from utils.performance.vad_scale import ARMS
    return {key: value for key, value in ARMS[arm].items() if key in VadConfig.model_fields}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--cache", type=Path, default=default_cache_dir(), help="model cache (tone, silero-vad)")
    parser.add_argument("--e2e", action="store_true", help="also the scale run's CPU per seat-frame (16 connections)")
    args = parser.parse_args()
    payloads = noise_frames(args.frames * 0.02, seed=1)
    config = AppConfig.model_validate({"asr": {"model": str(args.cache / "tone")},
                                       "vad": {"model": str(args.cache / "silero-vad")},
                                       "server": {"rate_limit": {"realtime_factor": 1e6, "burst_ms": 1e9}}})
    print("| stage | µs per seat-frame |\n|---|---|")
    for name, value in stages(config, payloads).items():
        print(f"| {name} | {value:.1f} |")
    e2e = end_to_end(args.cache) if args.e2e else {}
    print("\n| detector | in-process path (µs) | other | end-to-end server CPU (µs) | transport (difference) |")
    print("|---|---|---|---|---|")
    for arm in ("webrtc", "silero", "batched") if silero_batch is not None else ("webrtc", "silero"):
        path = whole_path(config, payloads, arm)
        inside = path.pop("in-process path")
        other = "; ".join(f"{key.strip()}: {value:.1f}" for key, value in path.items())
        total = e2e.get(arm)
        print(f"| {arm} | {inside:.1f} | {other or '-'} | {f'{total:.0f}' if total else '-'} | "
              f"{f'{total - inside:.0f}' if total else '-'} |")


def end_to_end(cache: Path) -> dict[str, float]:
    """µs of server CPU per seat-frame with 16 connections, per detector (``vad_scale.py``)."""
    import tempfile

    from utils.performance import vad_scale

    async def measure_all() -> dict[str, float]:
        found = {}
        with tempfile.TemporaryDirectory(prefix="frame-path-") as tmp, \
                vad_scale.servers(list(vad_scale.ARMS), cache, Path(tmp)) as running:
            for arm, server in running.items():
                row = await vad_scale.measure(server, 16, 8.0, 2.0)
                found[arm] = row["cpu_ms_per_seat_s"] * 1000.0 * vad_scale.FRAME_S
        return found
    return asyncio.run(measure_all())


if __name__ == "__main__":
    main()
