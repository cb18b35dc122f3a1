"""Broken SenseVoice model directories fail with a clear message, never a process exit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import yaml

from kitt_stt.asr.onnx_header import read_onnx_header
from kitt_stt.asr.sense_voice_model import ModelError, load_sense_voice_model


def copy_model(tone_dir: Path, target: Path) -> Path:
    shutil.copytree(tone_dir, target)
    return target


def drop_metadata_key(directory: Path, key: str) -> None:
    model = onnx.load(str(directory / "model.onnx"))
    kept = [entry for entry in model.metadata_props if entry.key != key]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    onnx.save(model, str(directory / "model.onnx"))


def test_header_reader_matches_onnx(tone_dir: Path) -> None:
    header = read_onnx_header(tone_dir / "model.onnx")
    model = onnx.load(str(tone_dir / "model.onnx"))
    assert header.metadata == {entry.key: entry.value for entry in model.metadata_props}
    assert [spec.name for spec in header.inputs] == ["x", "x_length", "language", "text_norm"]
    assert [(spec.dtype, len(spec.shape)) for spec in header.inputs] == [
        ("float", 3), ("int32", 1), ("int32", 1), ("int32", 1)]
    assert header.outputs[0].name == "logits"


@pytest.mark.parametrize("key", ["vocab_size", "lfr_window_size", "neg_mean", "lang_zh", "with_itn"])
def test_missing_metadata_key(tone_dir: Path, tmp_path: Path, key: str) -> None:
    broken = copy_model(tone_dir, tmp_path / "m")
    drop_metadata_key(broken, key)
    with pytest.raises(ModelError, match=key):
        load_sense_voice_model(broken)


def test_missing_tokens(tone_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tone_dir, tmp_path / "m")
    (broken / "tokens.txt").unlink()
    with pytest.raises(ModelError, match=r"tokens\.txt"):
        load_sense_voice_model(broken)


def test_tokens_that_do_not_match_the_model(tone_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tone_dir, tmp_path / "m")
    lines = (broken / "tokens.txt").read_text().splitlines()
    (broken / "tokens.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ModelError, match="vocab_size=24"):
        load_sense_voice_model(broken)


def test_truncated_and_garbage_model_files(tone_dir: Path, tmp_path: Path) -> None:
    truncated = copy_model(tone_dir, tmp_path / "t")
    data = (truncated / "model.onnx").read_bytes()
    (truncated / "model.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError):
        load_sense_voice_model(truncated)
    garbage = copy_model(tone_dir, tmp_path / "g")
    (garbage / "model.onnx").write_bytes(b"this is not onnx at all" * 100)
    with pytest.raises(ModelError):
        load_sense_voice_model(garbage)


def test_missing_model_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        load_sense_voice_model(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=r"model\.onnx"):
        load_sense_voice_model(tmp_path / "empty")


def serve_with_model(tmp_path: Path, model: str, provider: str = "cpu") -> subprocess.CompletedProcess:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"asr": {"model": model, "provider": provider},
                                      "models": {"cache_dir": str(tmp_path / "cache")}}))
    return subprocess.run([sys.executable, "-m", "kitt_stt", "serve", "--config", str(config), "--port", "0"],
                          capture_output=True, text=True, timeout=60)


def test_serve_refuses_a_broken_model_with_a_message(tone_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tone_dir, tmp_path / "broken")
    drop_metadata_key(broken, "inv_stddev")
    result = serve_with_model(tmp_path, str(broken))
    assert result.returncode == 2, result.stderr
    assert "cannot load the ASR model" in result.stderr and "inv_stddev" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_unknown_model_name(tmp_path: Path) -> None:
    result = serve_with_model(tmp_path, "no-such-model")
    assert result.returncode == 2
    assert "unknown model 'no-such-model'" in result.stderr


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_gpu_provider_is_refused_not_silently_cpu(tmp_path: Path, provider: str) -> None:
    result = serve_with_model(tmp_path, "tone", provider)
    assert result.returncode == 2
    assert f"asr.provider={provider}" in result.stderr


def test_wrong_input_dtype_is_refused(tone_dir: Path, tmp_path: Path) -> None:
    """sherpa-onnx would feed x_length as int32 by position and quietly return empty text."""
    broken = copy_model(tone_dir, tmp_path / "m")
    model = onnx.load(str(broken / "model.onnx"))
    model.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.INT64
    onnx.save(model, str(broken / "model.onnx"))
    with pytest.raises(ModelError, match="x_length"):
        load_sense_voice_model(broken)
