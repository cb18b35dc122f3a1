"""The tone model through the real sherpa-onnx loader: the synthesizer contract decodes exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sherpa_onnx

from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.models.tone_model import build_tone_model
from kitt_stt.models.tone_synth import TONE_PITCHES, add_white_noise, buzz, synthesize

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md

TOKENS = list(TONE_PITCHES)


@pytest.fixture(scope="module")
def recognizer(tone_dir: Path) -> sherpa_onnx.OfflineRecognizer:
    return sherpa_onnx.OfflineRecognizer.from_sense_voice(
        model=str(tone_dir / "model.onnx"), tokens=str(tone_dir / "tokens.txt"), num_threads=1
    )


def decode(recognizer: sherpa_onnx.OfflineRecognizer, audio: np.ndarray):
    stream = recognizer.create_stream()
    stream.accept_waveform(16000, audio.astype(np.float32))
    recognizer.decode_stream(stream)
    return stream.result


def random_utterance(rng: np.random.Generator, hardest: bool) -> tuple[str, np.ndarray]:
    """Random text within the contract: bursts 80-1000 ms, gaps >= 60 ms, peak 0.01-0.9, SNR >= 10 dB."""
    length = int(rng.integers(1, 7))
    text = "".join(rng.choice(TOKENS, length))
    if rng.random() < 0.3:
        text = text[0] * length  # repeated tokens need a blank between them
    peak = float(np.exp(rng.uniform(np.log(0.01), np.log(0.9))))
    pieces = [np.zeros(int(rng.integers(0, 16000)), np.float32)]
    for index, token in enumerate(text):
        if index:
            gap_ms = rng.uniform(60, 62) if hardest else rng.uniform(60, 300)
            pieces.append(np.zeros(int(gap_ms * 16), np.float32))
        burst_ms = rng.uniform(80, 82) if hardest else rng.uniform(80, 1000)
        pieces.append(buzz(TONE_PITCHES[token], burst_ms, peak))
    pieces.append(np.zeros(int(rng.integers(0, 8000)), np.float32))
    audio = np.concatenate(pieces)
    if rng.random() < 0.7:
        snr_db = rng.uniform(10, 11) if hardest else rng.uniform(10, 40)
        audio = add_white_noise(audio, snr_db, int(rng.integers(1 << 30)))
    return text, audio


@pytest.mark.parametrize("hardest", [False, True], ids=["within-contract", "contract-limits"])
def test_random_utterances_decode_exactly(recognizer, hardest: bool) -> None:
    rng = np.random.default_rng(20261129 + int(hardest))
    failures = []
    for _ in range(120):
        text, audio = random_utterance(rng, hardest)
        got = decode(recognizer, audio).text
        if got != text:
            failures.append((text, got))
    assert failures == []


def test_silence_and_noise_decode_to_nothing(recognizer) -> None:
    assert decode(recognizer, np.zeros(32000, np.float32)).text == ""
    for level in (1e-4, 1e-2, 0.3):
        noise = np.random.default_rng(7).normal(0, level, 80000).astype(np.float32)
        assert decode(recognizer, noise).text == ""


def test_reports_language_and_timestamps(recognizer) -> None:
    from kitt_stt.models.tone_synth import ToneStyle

    result = decode(recognizer, synthesize("打开车门", ToneStyle(lead_ms=300, burst_ms=200, gap_ms=100)))
    assert result.text == "打开车门"
    assert result.lang == "<|zh|>"
    # one token per burst onset: 300, 600, 900, 1200 ms, on the 60 ms frame grid
    assert np.allclose(result.timestamps, [0.3, 0.6, 0.9, 1.2], atol=0.061)


def test_build_is_deterministic_and_valid(tmp_path: Path, tone_dir: Path) -> None:
    digests = build_tone_model(tmp_path / "again")
    assert (tone_dir / "model.onnx").read_bytes() == (tmp_path / "again" / "model.onnx").read_bytes()
    assert set(digests) == {"model.onnx", "tokens.txt"}
    model = load_sense_voice_model(tmp_path / "again")
    assert model.vocab_size == 24
