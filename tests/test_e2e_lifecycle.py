"""Health endpoints, graceful SIGTERM drain, and the transcribe command against a real server."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import wave
from pathlib import Path

import httpx
import pytest

from kitt_stt.client.session import connect
from tests.helpers import commits, of_type, run_server, send_pcm, tone_pcm

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def test_healthz_and_readyz(server) -> None:
    assert httpx.get(f"{server.http}/healthz").json() == {"status": "alive"}
    ready = httpx.get(f"{server.http}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["model"]["name"] == "tone"


@pytest.mark.asyncio
async def test_sigterm_flushes_every_open_seat_then_closes(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"vad": {"silence_ms": 2000}}) as doomed:
        async with connect(doomed.url) as session:
            await send_pcm(session, tone_pcm("打开车门", tail_ms=100), seat="driver")
            await send_pcm(session, tone_pcm("ABC", tail_ms=100), seat="passenger")
            await session.ping("sent")
            frames = []
            while not of_type(frames, "pong"):
                frames.append(await session.receive())
            doomed.process.send_signal(signal.SIGTERM)
            frames += [frame async for frame in session.frames()]
            assert session.websocket.close_code == 1000
        assert await asyncio.to_thread(doomed.process.wait, 20) == 0
    assert {(f["seat"], f["text"]) for f in of_type(frames, "final")} == {("driver", "打开车门"), ("passenger", "ABC")}
    assert {(c["seat"], c["text"]) for c in commits(frames)} == {("driver", "打开车门"), ("passenger", "ABC")}
    assert {c["metadata"]["eot"]["decision"]["reason"] for c in commits(frames)} == {"stop"}
    assert {f["end_reason"] for f in of_type(frames, "final")} == {"stop"}


def kitt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitt_stt", *args], capture_output=True, text=True, timeout=60)


def test_transcribe_prints_the_exact_text(server, tmp_path: Path) -> None:
    wav = tmp_path / "say.wav"
    assert kitt("synth", "打开车门", str(wav)).returncode == 0
    result = kitt("transcribe", str(wav), "--url", server.url)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("final") and " 打开车门 " in line for line in lines), lines
    assert any(line.startswith("commit") and "打开车门" in line for line in lines), lines


def test_transcribe_realtime_shows_interims(server, tmp_path: Path) -> None:
    wav = tmp_path / "long.wav"
    kitt("synth", "ABCDEF", str(wav), "--burst-ms", "300", "--tail-ms", "600")
    result = kitt("transcribe", str(wav), "--url", server.url, "--realtime", "--seat", "driver")
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("interim  [driver]") for line in result.stdout.splitlines())
    assert "final    [driver] #1 ABCDEF" in result.stdout


def test_transcribe_rejects_wrong_format_clearly(tmp_path: Path) -> None:
    wav = tmp_path / "stereo44k.wav"
    with wave.open(str(wav), "wb") as handle:
        handle.setnchannels(2)
        handle.setsampwidth(2)
        handle.setframerate(44100)
        handle.writeframes(bytes(4 * 4410))
    result = kitt("transcribe", str(wav), "--url", "ws://127.0.0.1:9/none")
    assert result.returncode == 2
    assert "44100 Hz (need 16000)" in result.stderr and "2 channels" in result.stderr and "sox" in result.stderr


def test_transcribe_reports_unreachable_server(tmp_path: Path) -> None:
    wav = tmp_path / "a.wav"
    kitt("synth", "AB", str(wav))
    result = kitt("transcribe", str(wav), "--url", "ws://127.0.0.1:9/stt/sensevoice")
    assert result.returncode == 2 and "cannot stream" in result.stderr


def test_models_prepare_builds_the_configured_model_into_the_cache(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  cache_dir: {tmp_path / 'cache'}\nasr:\n  model: tone\n")
    result = kitt("models", "prepare", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cache" / "tone" / "model.onnx").is_file()
    assert (tmp_path / "cache" / "tone" / ".complete").is_file()
    # the default decision's two models too: TurnSense and the text view it reads the words with
    assert {"turnsense", "smollm2-turn"} <= {line.split(" ", 1)[0] for line in result.stdout.splitlines()}
    assert (tmp_path / "cache" / "smollm2-turn" / ".complete").is_file()


def test_models_verify_detects_a_flipped_byte(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  cache_dir: {tmp_path / 'cache'}\nturn:\n  model: null\n")
    assert kitt("models", "pull", "tone", "--config", str(config)).returncode == 0
    ok = kitt("models", "verify", "tone", "--config", str(config))
    assert ok.returncode == 0 and "tone: ok" in ok.stdout
    model = tmp_path / "cache" / "tone" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    bad = kitt("models", "verify", "tone", "--config", str(config))
    assert bad.returncode == 1 and "sha256 differs" in bad.stdout


def test_an_interrupted_install_is_not_taken_as_valid(tmp_path: Path) -> None:
    from kitt_stt.models.registry import RegistryEntry, install_into, verify_installed

    def crash(directory: Path, _models: object) -> dict[str, str]:
        (directory / "model.onnx").write_bytes(b"half a model")
        raise OSError("connection reset halfway")

    target = tmp_path / "cache" / "broken"
    with pytest.raises(OSError):
        install_into(RegistryEntry("broken", "tone", "", "", crash), target)
    assert not target.exists()  # the staging directory is gone, nothing looks installed
    assert verify_installed(target) and "not installed" in verify_installed(target)[0]
    assert [path.name for path in (tmp_path / "cache").iterdir()] == ["broken.lock"]  # only the install lock
