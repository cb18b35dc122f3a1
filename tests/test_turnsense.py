"""The real end-of-turn model (Smart Turn v3.2 from the pipecat-ai wheel) and its features."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.client.session import connect
from kitt_stt.config.schema import Provider
from kitt_stt.turnsense.features import log_mel
from kitt_stt.turnsense.model import MODEL_FILE, TurnModelError, TurnSenseModel
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, silence, tone_pcm

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def reference_log_mel(samples: np.ndarray) -> np.ndarray:
    """Whisper's log-mel written straight from its definition, one frame and one filter at a time."""
    audio = samples.astype(np.float64) / 32768.0
    audio = audio[-128000:]
    audio = np.concatenate([np.zeros(128000 - len(audio)), audio])
    audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
    # centred frames: reflect-pad n_fft/2 on both sides
    padded = np.concatenate([audio[1:201][::-1], audio, audio[-201:-1][::-1]])
    window = np.array([0.5 - 0.5 * np.cos(2 * np.pi * n / 400) for n in range(400)])

    def hz_to_mel(f: float) -> float:
        return f / (200 / 3) if f < 1000 else 15 + np.log(f / 1000) * 27 / np.log(6.4)

    def mel_to_hz(m: float) -> float:
        return m * (200 / 3) if m < 15 else 1000 * np.exp((m - 15) * np.log(6.4) / 27)

    edges = [mel_to_hz(hz_to_mel(0) + i * (hz_to_mel(8000) - hz_to_mel(0)) / 81) for i in range(82)]
    bins = [k * 8000 / 200 for k in range(201)]
    filters = np.zeros((80, 201))
    for m in range(80):
        lower, centre, upper = edges[m], edges[m + 1], edges[m + 2]
        for k, f in enumerate(bins):
            weight = min((f - lower) / (centre - lower), (upper - f) / (upper - centre))
            filters[m, k] = max(0.0, weight) * 2 / (upper - lower)
    columns = []
    for start in range(0, len(padded) - 400 + 1, 160):
        spectrum = np.fft.rfft(padded[start : start + 400] * window)
        power = spectrum.real**2 + spectrum.imag**2
        columns.append(np.log10(np.maximum(filters @ power, 1e-10)))
    mel = np.stack(columns, axis=1)[:, :-1]
    mel = np.maximum(mel, mel.max() - 8)
    return (mel + 4) / 4


@pytest.mark.parametrize("seconds", [0.3, 3.0, 8.0, 11.0])
def test_features_match_the_whisper_definition(seconds: float) -> None:
    samples = (np.random.default_rng(int(seconds * 10)).normal(0, 2000, int(seconds * 16000))).astype(np.int16)
    ours = log_mel(samples)
    assert ours.shape == (80, 800) and ours.dtype == np.float32
    assert np.abs(ours - reference_log_mel(samples)).max() <= 1e-6


def test_same_audio_same_probability(turnsense_dir: Path) -> None:
    model = TurnSenseModel(turnsense_dir / MODEL_FILE)
    audio = np.frombuffer(tone_pcm("打开车门"), dtype="<i2")
    first, second = model.predict(audio), model.predict(audio.copy())
    assert first.probability == second.probability
    assert 0.0 < first.probability < 1.0
    assert first.model_ms > 0 and first.features_ms > 0


def test_model_files_and_licence(turnsense_dir: Path) -> None:
    assert (turnsense_dir / "LICENSE").read_text().startswith("BSD 2-Clause License")
    assert "smart-turn-v3.2-cpu.onnx" in (turnsense_dir / "NOTICE").read_text()


def test_cuda_provider_is_refused_on_a_cpu_machine(turnsense_dir: Path) -> None:
    with pytest.raises(TurnModelError, match="CUDAExecutionProvider"):
        TurnSenseModel(turnsense_dir / MODEL_FILE, provider=Provider.CUDA)


def test_serve_refuses_turn_provider_cuda(tmp_path: Path, model_cache: Path, turnsense_dir: Path) -> None:
    import subprocess
    import sys

    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"turn": {"provider": "cuda"}, "models": {"cache_dir": str(model_cache)}}))
    result = subprocess.run([sys.executable, "-m", "kitt_stt", "serve", "--config", str(config), "--port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "end-of-turn model" in result.stderr and "turn.provider=cuda" in result.stderr


async def test_commit_carries_the_model_decision(tmp_path: Path, model_cache: Path, turnsense_dir: Path) -> None:
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 0.5}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with connect(server.url) as session:
            await send_pcm(session, tone_pcm("打开车门", tail_ms=1200))
            frames = await collect_until(session, lambda fs: bool(commits(fs)))
    commit = commits(frames)[0]
    decision = commit["metadata"]["eot"]["decision"]
    assert decision["reason"] in {"model", "timeout"}
    assert isinstance(decision["probability"], float) and 0 < decision["probability"] < 1
    assert decision["threshold"] == 0.5
    assert decision["model_ms"] > 0 and decision["wait_ms"] >= 0
    assert (decision["reason"] == "model") == (decision["probability"] >= 0.5)
    final = of_type(frames, "final")[0]
    assert final["text"] == "打开车门"


async def test_a_waiting_seat_never_delays_another(tmp_path: Path, model_cache: Path, turnsense_dir: Path) -> None:
    # threshold 1.0 is never reached (the model's outputs top out below 1), so the driver's turn
    # waits the full 3 s while the passenger speaks, gets its final and commits (finalize).
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 1.0, "wait_ms": 3000}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with connect(server.url) as session:
            await send_pcm(session, tone_pcm("打开车门", tail_ms=700), seat="driver")
            await collect_until(session, lambda fs: bool(of_type(fs, "final", "driver")))
            await send_pcm(session, tone_pcm("ABC", tail_ms=0), seat="passenger")
            await session.send_audio(silence(20), seat="passenger")
            await session.finalize("passenger")
            frames = await collect_until(session, lambda fs: bool(commits(fs, "passenger")), timeout=2.5)
            assert commits(frames, "driver") == []  # still waiting
            passenger_final = of_type(frames, "final", "passenger")[0]
            assert passenger_final["text"] == "ABC" and passenger_final["server_latency_ms"] < 500
            frames += await asyncio.wait_for(collect_until(session, lambda fs: bool(commits(fs, "driver"))), 5)
    assert commits(frames, "driver")[0]["metadata"]["eot"]["decision"]["reason"] == "timeout"
