"""Whisper on our own onnxruntime sessions (asr/ort_whisper.py) against sherpa-onnx, the reference,
on the real whisper-base: the same greedy search over the same graphs must write the same text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.factory import build_engine
from kitt_stt.asr.ort_whisper import OrtWhisperEngine, read_token_bytes
from kitt_stt.asr.providers import ProviderError
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_graphs import padded_mel
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig, AsrConfig, Engine

SPEECH = Path(__file__).parent / "fixtures" / "speech"
# the fixtures whose decode is not a near-tie (zh_jin_tian_tian_qi_zen_me_yang's first token is
# ahead of the next by 0.17 nats: sherpa-onnx's bundled onnxruntime and ours pick differently)
CLIPS = [("en_go_forward_ten_meters", "en"), ("en_open_the_car_door_please", "en"),
         ("en_turn_on_the_air_conditioning", "en"), ("zh_da_kai_che_men", "zh")]


@pytest.fixture(scope="module")
def engines(whisper_dir: Path) -> tuple[OrtWhisperEngine, SherpaWhisperEngine]:
    model = load_whisper_model(whisper_dir)
    return OrtWhisperEngine(model, "whisper", AsrConfig()), SherpaWhisperEngine(model, "whisper")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("clip", "language"), [*CLIPS, ("en_go_forward_ten_meters", "auto")])
def test_greedy_decode_matches_sherpa_onnx(engines: tuple[OrtWhisperEngine, SherpaWhisperEngine], clip: str,
                                           language: str) -> None:
    ours, reference = engines
    request = [AsrRequest(read_wav_16k_mono(SPEECH / f"{clip}.wav"), DecodeOptions(language=language))]
    got, expected = ours.decode_batch(request)[0], reference.decode_batch(request)[0]
    assert got.text and (got.text, got.lang, got.tokens) == (expected.text, expected.lang, expected.tokens)


def test_silence_and_a_whisper_window_of_speech_match_too(engines: tuple[OrtWhisperEngine, SherpaWhisperEngine]
                                                          ) -> None:
    """Half a second of silence, and speech past sherpa-onnx's 2950 frames (both keep the first
    29.5 s). No audio at all is an empty text here (sherpa-onnx crashes the process on it)."""
    ours, reference = engines
    speech = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")
    long = np.concatenate([np.zeros(16000 * 28, dtype=np.int16), speech])
    for samples in (np.zeros(8000, dtype=np.int16), long):
        request = [AsrRequest(samples, DecodeOptions(language="en"))]
        got, expected = ours.decode_batch(request)[0], reference.decode_batch(request)[0]
        assert (got.text, got.tokens) == (expected.text, expected.tokens)
    nothing = ours.decode_batch([AsrRequest(np.zeros(0, dtype=np.int16), DecodeOptions(language="en"))])[0]
    assert nothing.text == "" and nothing.tokens == []


def test_restricted_auto_detects_on_the_engines_own_sessions(whisper_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With allowed languages the language step runs on the decoding engine's sessions: one copy of
    the model, and the decode is in the language chosen within the set."""
    engine = build_engine(AppConfig.model_validate({"asr": {"model": str(whisper_dir)}}))
    assert isinstance(engine, OrtWhisperEngine)
    created: list[object] = []
    original = ort.InferenceSession.__init__

    def counting(self: ort.InferenceSession, *args: Any, **kwargs: Any) -> None:
        created.append(args[0])
        original(self, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "__init__", counting)
    options = DecodeOptions(language="auto", languages=("zh", "en"))
    result = engine.decode_batch([AsrRequest(read_wav_16k_mono(SPEECH / "zh_da_kai_che_men.wav"), options)])[0]
    monkeypatch.undo()
    assert created == []  # the language step built no sessions of its own
    assert result.lang == "zh" and "車門" in result.text and result.lang_probability is not None


def test_engine_setting_picks_the_whisper_engine(whisper_dir: Path) -> None:
    model = str(whisper_dir)
    assert AsrConfig.model_validate({"engine": "ort"}).engine is Engine.ONNXRUNTIME
    assert isinstance(build_engine(AppConfig.model_validate({"asr": {"model": model, "engine": "ort"}})),
                      OrtWhisperEngine)
    assert isinstance(build_engine(AppConfig.model_validate({"asr": {"model": model, "engine": "sherpa"}})),
                      SherpaWhisperEngine)
    if "CUDAExecutionProvider" not in ort.get_available_providers():  # the placement check, as for SenseVoice
        with pytest.raises(ProviderError, match="CUDAExecutionProvider"):
            build_engine(AppConfig.model_validate({"asr": {"model": model, "provider": "cuda"}}))


def test_token_table_and_padding(whisper_dir: Path) -> None:
    table = read_token_bytes(str(load_whisper_model(whisper_dir).tokens_path))
    assert table[220] == b" " and 50257 not in table  # text tokens only: specials never reach the text
    mel = np.ones((80, 5), dtype=np.float32)
    padded = padded_mel(mel, 3)
    assert padded.shape == (1, 80, 8) and padded[0, :, 5:].sum() == 0 and padded[0, :, :5].sum() == 400
    assert padded_mel(np.ones((80, 2990), dtype=np.float32), 700).shape == (1, 80, 3000)
    assert padded_mel(np.zeros((80, 0), dtype=np.float32), 0).shape == (1, 80, 2)
