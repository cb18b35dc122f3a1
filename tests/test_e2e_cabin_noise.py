"""Speech in cabin noise through a real server: the segment ends in the noise, so the final and
the commit come, with the words (tone model on webrtcvad; whisper-base on Silero VAD)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.client.session import connect
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, tone_pcm
from utils.performance import cabin_noise

SPEECH = Path(__file__).parent / "fixtures" / "speech"


def in_noise(pcm: np.ndarray, noise: str, snr_db: float, tail_ms: int = 2000) -> bytes:
    padded = np.concatenate([np.zeros(8000, np.int16), pcm, np.zeros(16 * tail_ms, np.int16)])
    unit = cabin_noise.SYNTHETIC[noise](padded.shape[0], np.random.default_rng(11))
    return cabin_noise.mix(padded, unit, snr_db).astype("<i2").tobytes()


async def turn_of(url: str, pcm: bytes, language: str | None = None) -> list[dict]:
    """Stream ``pcm`` (noise goes on after the speech) until the commit."""
    async with connect(url) as session:
        if language:
            await session.configure(language=language)
        sender = asyncio.create_task(send_pcm(session, pcm, realtime_factor=4.0))
        frames = await collect_until(session, lambda got: bool(commits(got)), timeout=60)
        await sender
    return frames


def test_tone_phrase_in_road_noise_gets_its_final_and_commit(server) -> None:
    """The fault seen in the car: webrtcvad heard brown noise 10 dB below the voice as speech, so
    the segment stayed open until vad.max_segment_ms (no final, no commit)."""
    voice = np.frombuffer(tone_pcm("打开车门", lead_ms=0, tail_ms=0), dtype="<i2")
    for noise in ("brown", "engine"):
        frames = asyncio.run(turn_of(server.url, in_noise(voice, noise, 10.0)))
        assert [final["text"] for final in of_type(frames, "final") if final["text"]] == ["打开车门"], noise
        assert commits(frames)[0]["text"] == "打开车门"
        assert of_type(frames, "final")[-1]["end_reason"] == "silence"


@pytest.mark.timeout(300)
def test_human_command_in_engine_noise_on_silero(tmp_path: Path, model_cache: Path, whisper_dir: Path) -> None:
    overrides = {"asr": {"model": "whisper-base"}, "interim": {"enabled": False},
                 "vad": {"engine": "silero", "model": "silero-vad"}}
    voice = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")
    with run_server(tmp_path, model_cache, overrides) as server:
        frames = asyncio.run(turn_of(server.url, in_noise(voice, "engine", 5.0), language="en"))
    words = " ".join(final["text"] for final in of_type(frames, "final")).lower()
    assert "forward" in words and "meters" in words, words
    assert len(of_type(frames, "final")) == 1  # no empty segments from the noise
    assert commits(frames)[0]["text"]
