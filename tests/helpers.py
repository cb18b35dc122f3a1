"""Shared test helpers: tone speech as PCM, running a real server, collecting frames."""

from __future__ import annotations

import asyncio
import io
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from kitt_stt.asr.engine import AsrEngine
from kitt_stt.client.session import SttSession
from kitt_stt.config.schema import AppConfig
from kitt_stt.models.tone_synth import ToneStyle, synthesize
from kitt_stt.pipeline.eot import SilenceTimeoutPolicy
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.scheduler import InferenceScheduler

FRAME_BYTES = 640  # 20 ms of 16 kHz int16

# Where pyproject's `dev` extra installs pocketsphinx 5.0.4 (the turn studies' aligner and corpus;
# Linux wheels: CPython 3.10-3.13 on x86_64, none for aarch64): its tests skip only elsewhere and
# must find it installed here.
POCKETSPHINX_WHEEL = platform.machine() == "x86_64" and sys.version_info < (3, 14)


def needs_torch() -> None:
    """Skip unless torch is importable: converting whisper-base needs it, and PyPI has no CPU torch
    for every Python the service supports (`make test` runs the 3.10 suite on the whisper-base the
    3.11 run converted, so only the conversion tests themselves skip there)."""
    pytest.importorskip("torch", reason="converting Whisper needs torch (the `convert` extra)")


def tone_pcm(text: str, lead_ms: float = 300.0, tail_ms: float = 800.0, **style: Any) -> bytes:
    audio = synthesize(text, ToneStyle(lead_ms=lead_ms, tail_ms=tail_ms, **style))
    samples = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    pad = (-samples.shape[0]) % (FRAME_BYTES // 2)
    return np.concatenate([samples, np.zeros(pad, dtype="<i2")]).tobytes()


def wav_bytes(pcm: bytes, rate: int = 16000, channels: int = 1) -> bytes:
    """16-bit PCM as the bytes of a WAV file (what a client uploads or a framework reads)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(channels)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(pcm)
    return buffer.getvalue()


def frames_of(pcm: bytes, frame_bytes: int = FRAME_BYTES) -> list[bytes]:
    """20 ms frames; a short last frame is padded with silence, as ``kitt-stt transcribe`` does."""
    pcm += bytes(-len(pcm) % frame_bytes)
    return [pcm[i : i + frame_bytes] for i in range(0, len(pcm), frame_bytes)]


def silence(ms: int) -> bytes:
    return bytes(32 * ms)


def cough_pcm(ms: int = 200, lead_ms: int = 300, tail_ms: int = 1500) -> bytes:
    """A short non-word sound (white noise, seeded): the VAD hears speech, the tone model no words,
    so the turn it opens has only an empty final, as a cough or a door has."""
    burst = np.random.default_rng(3).normal(0.0, 6000.0, 16 * ms).clip(-32767, 32767).astype("<i2")
    return silence(lead_ms) + burst.tobytes() + silence(tail_ms)


async def send_pcm(session: SttSession, pcm: bytes, seat: str = "default",
                   realtime_factor: float | None = None) -> None:
    started = time.monotonic()
    for index, frame in enumerate(frames_of(pcm)):
        if realtime_factor:
            delay = started + index * 0.02 / realtime_factor - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await session.send_audio(frame, seat=seat)


async def collect_until(session: SttSession, predicate, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Receive frames until ``predicate(frames)`` holds; fail on timeout with what arrived."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not predicate(frames):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out; frames so far: {frames}")
        frames.append(await asyncio.wait_for(session.receive(), remaining))
    return frames


def commits(frames: list[dict[str, Any]], seat: str | None = None) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "commit" and (seat is None or f["seat"] == seat)]


def of_type(frames: list[dict[str, Any]], kind: str, seat: str | None = None) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind and (seat is None or f.get("seat") == seat)]


async def stream_through_seat(engine: AsrEngine, config: AppConfig, settings: SessionSettings, pcm: bytes, *,
                              wait_ms: int = 50, workers: int = 1, realtime: bool = False, admission: object = None,
                              client_stop: bool = False, timeout: float = 10.0) -> list[dict[str, Any]]:
    """One seat of the real pipeline on ``engine`` (its own scheduler, a silence-timeout policy of
    ``wait_ms``): ``pcm`` pushed at once or in real-time 20 ms frames, then a client ``vad stop`` if
    asked; its frames once it committed."""
    scheduler = InferenceScheduler(engine, workers=workers)
    scheduler.start()
    frames: list[dict[str, Any]] = []
    seat = SeatPipeline("driver", config, lambda: settings, scheduler, SilenceTimeoutPolicy(wait_ms),
                        lambda frame: frames.append(frame.model_dump()), owner="test",
                        admission=admission)  # type: ignore[arg-type]
    try:
        if realtime:
            started = time.monotonic()
            for index, frame in enumerate(frames_of(pcm)):
                seat.push_audio(np.frombuffer(frame, dtype="<i2"))
                await asyncio.sleep(max(0.0, started + (index + 1) * 0.02 - time.monotonic()))
        else:
            seat.push_audio(np.frombuffer(pcm, dtype="<i2"))
        if client_stop:
            seat.client_vad("stop")
        deadline = time.monotonic() + timeout
        while not commits(frames):
            assert time.monotonic() < deadline, frames
            await asyncio.sleep(0.01)
    finally:
        seat.close()
        scheduler.stop()
    return frames


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TEST_CONFIG: dict[str, Any] = {
    "server": {"host": "127.0.0.1", "rate_limit": {"realtime_factor": 200.0, "burst_ms": 600_000},
               "shutdown_grace_s": 5},
    "asr": {"model": "tone"},
    # the tone language is heard by webrtcvad, not by Silero (docs/testing.md): pipeline tests pin it
    "vad": {"engine": "webrtc", "silence_ms": 300},
    "interim": {"start_ms": 200, "min_interval_ms": 200},
    "turn": {"wait_ms": 300, "model": None},
}


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = deep_merge(merged[key], value) if nested else value
    return merged


@dataclass
class RunningServer:
    process: subprocess.Popen
    port: int
    log_path: Path
    path: str = "/stt/sensevoice"

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.path}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=20)


@contextmanager
def run_server(tmp_path: Path, cache_dir: Path, overrides: dict[str, Any] | None = None,
               module: str = "kitt_stt", port: int | None = None) -> Iterator[RunningServer]:
    """Start ``kitt-stt serve`` as a real process on a free port (or ``port``: a restart on the same
    address); wait until /readyz says ready. ``module``: what ``python -m`` runs (a test wrapper
    around the CLI, such as tests.slow_decode_server)."""
    config = deep_merge(TEST_CONFIG, {"models": {"cache_dir": str(cache_dir)}})
    config = deep_merge(config, overrides or {})
    port = port or free_port()
    config_path = tmp_path / f"server-{port}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KITT_STT")}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "serve", "--config", str(config_path), "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, env=env,
        )
    server = RunningServer(process, port, log_path, config.get("server", {}).get("path", "/stt/sensevoice"))
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
            try:
                if httpx.get(f"{server.http}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in time:\n{server.log()}")
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def running(scheduler: InferenceScheduler) -> Iterator[InferenceScheduler]:
    """A started scheduler, stopped again however the test ends."""
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.stop()
