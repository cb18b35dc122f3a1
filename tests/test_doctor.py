"""``kitt-stt doctor``: the table, the exit status and the JSON on this CPU-only machine, and the
probes behind them (GPU, libraries, models, caches) with the inputs a GPU host would give."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest
import yaml

from kitt_stt.models.checksums import sha256_file
from kitt_stt.ops.gpu import parse_nvidia_smi, probe_gpus
from kitt_stt.ops.libraries import (
    LIBRARIES,
    LibraryStatus,
    LinkCheck,
    OrtInfo,
    cuda_major,
    decode_cuda_version,
    decode_nvidia_version,
    parse_ldd,
    probe_library,
)
from kitt_stt.ops.model_files import locate_model
from kitt_stt.ops.report import Report, Status, render_json, render_table
from kitt_stt.ops.writable import writable


def doctor(tmp_path: Path, config: dict, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {key: value for key, value in os.environ.items() if not key.startswith("KITT_STT")}
    return subprocess.run([sys.executable, "-m", "kitt_stt", "doctor", "--config", str(path), *flags],
                          capture_output=True, text=True, timeout=120, env=env)


def cpu_config(model_cache: Path, tmp_path: Path, **asr: str) -> dict:
    return {"models": {"cache_dir": str(model_cache)}, "turn": {"model": None},
            "asr": {"model": "tone", "tensorrt": {"cache_dir": str(tmp_path / "trt")}, **asr}}


def test_cpu_config_prints_the_table_and_passes(tmp_path: Path, model_cache: Path) -> None:
    result = doctor(tmp_path, cpu_config(model_cache, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for expected in ("python", "onnxruntime", "CPUExecutionProvider", "libcudart", "no GPU",
                     f"sha256 {sha256_file(model_cache / 'tone' / 'model.onnx')}", "model cache",
                     "TensorRT engines", "can be created"):
        assert expected in out, expected
    assert out.rstrip().splitlines()[-1].startswith("OK: this host can run this configuration")


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this host has CUDA")
@pytest.mark.parametrize(("provider", "names"), [
    ("cuda", ["CUDAExecutionProvider", "libcudart", "no GPU"]),
    ("tensorrt", ["TensorrtExecutionProvider", "CUDAExecutionProvider", "libnvinfer", "no GPU"]),
])
def test_gpu_provider_on_this_host_fails_naming_what_is_missing(tmp_path: Path, model_cache: Path, provider: str,
                                                                names: list[str]) -> None:
    result = doctor(tmp_path, cpu_config(model_cache, tmp_path, provider=provider))
    assert result.returncode == 1
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith("FAILED: this host lacks what the configuration asks for:")
    for name in names:
        assert name in last, (name, last)
    assert "FAIL" in result.stdout and "Traceback" not in result.stderr


def test_json_parses_and_no_device_skips_only_the_device(tmp_path: Path, model_cache: Path) -> None:
    result = doctor(tmp_path, cpu_config(model_cache, tmp_path, provider="cuda"), "--json", "--no-device")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["exit_code"] == 1
    assert "CUDAExecutionProvider" in data["missing"] and not any("GPU" in item for item in data["missing"])
    assert {"section", "item", "status", "detail"} <= set(data["rows"][0])
    assert data["facts"]["onnxruntime"]["version"] and data["facts"]["gpu"]["gpus"] == []
    assert data["facts"]["models"][0]["files"][0]["sha256"]
    ok = doctor(tmp_path, cpu_config(model_cache, tmp_path), "--json", "--no-device")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True


def test_a_model_not_installed_is_only_a_warning(tmp_path: Path) -> None:
    config = {"models": {"cache_dir": str(tmp_path / "empty")}, "turn": {"model": None}, "asr": {"model": "tone"}}
    result = doctor(tmp_path, config)
    assert result.returncode == 0, result.stdout
    assert "not installed" in result.stdout and "1 warning" in result.stdout
    assert not (tmp_path / "empty" / "tone").exists()  # the doctor installs nothing


def test_configured_ep_context_model_that_is_missing_fails(tmp_path: Path, model_cache: Path) -> None:
    config = cpu_config(model_cache, tmp_path, provider="tensorrt")
    config["asr"]["tensorrt"]["ep_context_model"] = str(tmp_path / "nowhere.onnx")
    result = doctor(tmp_path, config, "--no-device")
    assert result.returncode == 1 and "nowhere.onnx" in result.stdout.splitlines()[-1]


# ----- probes ------------------------------------------------------------------------------------

def test_gpu_probe_on_a_cpu_host_says_no_gpu() -> None:
    probe = probe_gpus()
    assert probe.gpus == () and probe.summary().startswith("no GPU (") and probe.device(0) is None


def test_nvidia_smi_rows_and_version_encodings() -> None:
    gpus = parse_nvidia_smi("NVIDIA GeForce RTX 4090, 8.9, 24564\nOrin (nvgpu), [N/A], [N/A]\n")
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 4090", "8.9", 24564), (1, "Orin (nvgpu)", "", None)]
    assert decode_cuda_version(12090) == "12.9" and decode_cuda_version(12020) == "12.2"
    assert decode_nvidia_version(101401) == "10.14.1"  # TensorRT 10
    assert decode_nvidia_version(8601) == "8.6.1"  # TensorRT 8
    assert decode_nvidia_version(92800) == "9.28.0"  # cuDNN 9
    assert decode_nvidia_version(8907) == "8.9.7"  # cuDNN 8
    assert decode_nvidia_version(11401) == "11.4.1"  # cuFFT


def test_library_in_site_packages_but_off_the_loader_path_is_named_with_the_fix(tmp_path: Path) -> None:
    spec = next(spec for spec in LIBRARIES if spec.name == "libcudart")
    wheel = tmp_path / "nvidia" / "cuda_runtime" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libcudart.so.12").write_bytes(b"")
    status = probe_library(spec, 12, [tmp_path])
    assert not status.loadable and status.path == str(wheel / "libcudart.so.12")
    assert f"add {wheel} to LD_LIBRARY_PATH" in status.note
    assert probe_library(spec, 12, [tmp_path / "nothing"]).note.startswith("not found")
    assert cuda_major(OrtInfo("onnxruntime-gpu", "1.27.0", (), "13.0", {}, ())) == 13
    assert cuda_major(OrtInfo("onnxruntime", "1.32.0", (), None, {}, ())) == 12
    assert spec.soname(13) == "libcudart.so.13"


def test_ldd_output_and_libraries_found_through_the_provider_library() -> None:
    from kitt_stt.ops.doctor import _check_libraries

    text = ("\tlinux-vdso.so.1 (0x00007ffc)\n\tlibcudart.so.12 => /sp/nvidia/cuda_runtime/lib/libcudart.so.12 (0x7f)\n"
            "\tlibcudnn.so.9 => not found\n")
    assert parse_ldd(text) == {"libcudart.so.12": "/sp/nvidia/cuda_runtime/lib/libcudart.so.12", "libcudnn.so.9": None}
    cudart, cudnn = (next(spec for spec in LIBRARIES if spec.name == name) for name in ("libcudart", "libcudnn"))
    report = Report("t")
    links = [LinkCheck(Path("libonnxruntime_providers_cuda.so"), ("libcudnn.so.9",),
                       resolved={"libcudart.so.12": "/sp/nvidia/cuda_runtime/lib/libcudart.so.12"})]
    _check_libraries(report, [LibraryStatus(cudart, False, "libcudart.so.12", note="not found"),
                              LibraryStatus(cudnn, False, "libcudnn.so.9", note="not found")], links, {"cuda"})
    assert [row.status for row in report.rows] == [Status.OK, Status.FAIL]
    assert report.missing == ["libcudnn.so.9"]


def test_models_are_located_and_hashed_without_installing(tmp_path: Path, model_cache: Path) -> None:
    from kitt_stt.config.schema import ModelsConfig

    cache = tmp_path / "cache"
    shutil.copytree(model_cache / "tone", cache / "tone")
    location = locate_model("tone", ModelsConfig(cache_dir=cache), "asr.model")
    assert location.present and not location.problem
    onnx_file = next(file for file in location.files if file.path.name == "model.onnx")
    assert onnx_file.sha256 == onnx_file.recorded_sha256 == sha256_file(cache / "tone" / "model.onnx")
    (cache / "tone" / "tokens.txt").write_text("changed\n")
    assert "sha256 differs from install: tokens.txt" in locate_model("tone", ModelsConfig(cache_dir=cache), "x").problem
    absent = locate_model("sensevoice", ModelsConfig(cache_dir=cache), "asr.model")
    assert not absent.present and absent.problem.startswith("not installed")
    assert not (cache / "sensevoice").exists()
    directory = locate_model(str(cache / "tone"), ModelsConfig(), "asr.model")
    assert directory.present and {file.path.name for file in directory.files} == {"model.onnx", "tokens.txt"}
    assert not locate_model(str(tmp_path / "nope"), ModelsConfig(), "asr.model").present


def test_writable_cache_directories(tmp_path: Path) -> None:
    assert writable(tmp_path) == (True, f"writable: {tmp_path}")
    assert writable(tmp_path / "a" / "b") == (True, f"can be created: {tmp_path / 'a' / 'b'}")
    (tmp_path / "file").write_text("")
    assert writable(tmp_path / "file")[0] is False
    assert writable(tmp_path / "file" / "sub")[0] is False


def test_report_rendering_and_exit_status() -> None:
    report = Report("kitt-stt doctor: test")
    report.add("host", "python", Status.INFO, "3.11")
    assert report.exit_code == 0 and render_table(report).rstrip().endswith("OK: this host can run this configuration")
    report.warn("models", "asr.model=x", "not installed")
    report.fail("onnxruntime", "CUDAExecutionProvider", "not in onnxruntime", "CUDAExecutionProvider")
    report.fail("libraries", "libcudnn", "not found", "libcudnn.so.9")
    table = render_table(report)
    assert report.exit_code == 1
    assert table.rstrip().splitlines()[-1] == ("FAILED: this host lacks what the configuration asks for: "
                                               "CUDAExecutionProvider; libcudnn.so.9")
    header, rule = table.splitlines()[2:4]
    assert header.split() == ["section", "item", "status", "detail"] and set(rule.replace(" ", "")) == {"-"}
    data = json.loads(render_json(report))
    assert data["missing"] == ["CUDAExecutionProvider", "libcudnn.so.9"] and data["warnings"]


@pytest.mark.filterwarnings("ignore:Specified provider")
@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this host has CUDA")
def test_session_smoke_test_reports_a_fallback_on_this_host() -> None:
    from kitt_stt.ops.doctor import session_smoke_test

    # no CUDA here: not an exception, the reason
    assert session_smoke_test("cuda", 0) == "the session fell back to CPUExecutionProvider"


def test_no_device_tolerates_only_the_driver_libraries_a_container_gets_at_run_time() -> None:
    """On Jetson, TensorRT links driver libraries that exist only in running containers: an image
    build (--no-device) must not fail on them, and must still fail on anything else."""
    from kitt_stt.ops.doctor import _check_libraries
    from kitt_stt.ops.libraries import driver_library

    assert driver_library("libnvdla_compiler.so") and driver_library("libcuda.so.1")
    assert not driver_library("libcudnn.so.9") and not driver_library("libnvinfer.so.10")
    nvinfer = next(spec for spec in LIBRARIES if spec.name == "libnvinfer")
    on_driver = LibraryStatus(nvinfer, False, "libnvinfer.so.10",
                              note="libnvdla_compiler.so: cannot open shared object file: No such file or directory")
    on_other = LibraryStatus(nvinfer, False, "libnvinfer.so.10",
                             note="libcublasLt.so.12: cannot open shared object file: No such file or directory")
    assert on_driver.lacks_only_driver == "libnvdla_compiler.so" and on_other.lacks_only_driver == ""
    build = Report("t")
    _check_libraries(build, [on_driver], [], {"cuda", "tensorrt"}, no_device=True)
    assert build.ok and "mounted at run time" in build.rows[0].detail
    device = Report("t")
    _check_libraries(device, [on_driver], [], {"cuda", "tensorrt"}, no_device=False)
    assert device.missing == ["libnvinfer.so.10"]
    other = Report("t")
    _check_libraries(other, [on_other], [], {"cuda", "tensorrt"}, no_device=True)
    assert other.missing == ["libnvinfer.so.10"]


def test_the_text_view_is_checked_by_running_it(tmp_path: Path, model_cache: Path, turnsense_dir: Path,
                                                text_model_dir: Path) -> None:
    """The default decision reads the words: the doctor names turn.text_model, loads it and scores a
    phrase (intact files can still need a newer onnxruntime than this host's)."""
    config = {**cpu_config(model_cache, tmp_path), "turn": {"model": "turnsense", "text_model": "smollm2-turn"}}
    result = doctor(tmp_path, config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "turn.text_model=smollm2-turn" in result.stdout and "'open the window': end log-odds" in result.stdout


def test_a_text_model_that_cannot_run_fails_with_the_reason(tmp_path: Path, model_cache: Path, turnsense_dir: Path,
                                                            text_model_dir: Path) -> None:
    broken = tmp_path / "text-model"
    broken.mkdir()
    for file in text_model_dir.iterdir():
        if not file.name.startswith("."):
            (broken / file.name).symlink_to(file)
    config_file = broken / "text-model.json"
    settings = json.loads(config_file.read_text())
    del settings["layers"]  # a key the loader reads after the files open
    config_file.unlink()
    config_file.write_text(json.dumps(settings))
    config = {**cpu_config(model_cache, tmp_path), "turn": {"model": "turnsense", "text_model": str(broken)}}
    result = doctor(tmp_path, config)
    assert result.returncode == 1, result.stdout
    assert "not a usable end-of-turn text model (KeyError: 'layers')" in result.stdout


def test_weights_that_serve_would_refuse_fail_the_doctor(tmp_path: Path, model_cache: Path) -> None:
    weights = tmp_path / "weights.json"
    weights.write_text('{"features": ["word_count"], "mean": [0], "scale": [1], "weights": [1], "bias": 0}')
    config = {**cpu_config(model_cache, tmp_path), "turn": {"model": "turnsense", "fused_weights": str(weights)}}
    result = doctor(tmp_path, config, "--no-device")
    assert result.returncode == 1, result.stdout
    assert "turn.fused_weights" in result.stdout and "does not build" in result.stdout
