"""The GPU acceptance tool's CPU-runnable parts: arguments, the step runner, the provider-placement
check on profiles, the install plan, the results table, and its CPU path end to end (no GPU:
stop at step 1 with exit status 3, before installing or building anything)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from utils.gpu import acceptance
from utils.gpu.install import finish_commands, install_commands, pinned, pins_file
from utils.gpu.placement import Placement, load_profile, placement_problem, summarize
from utils.gpu.steps import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, NoGpu, Step, StepFailed, run_steps
from utils.gpu.summary import format_table, latency_value, summary_rows

REPO = Path(__file__).resolve().parents[1]


def test_arguments_and_defaults(tmp_path: Path) -> None:
    args = acceptance.parse_args([])
    assert (args.seats, args.lengths, args.device_id, args.skip) == (4, [3.0, 15.0, 30.0], 0, [])
    args = acceptance.parse_args(["--skip-install", "--model", str(tmp_path), "--skip", "latency", "--seats", "2"])
    assert args.skip == ["latency", "install"] and args.model == tmp_path and args.seats == 2
    with pytest.raises(SystemExit) as exit_info:
        acceptance.parse_args(["--skip", "nonsense"])
    assert exit_info.value.code == 2
    assert [step.name for step in acceptance.STEPS] == ["gpu", "install", "doctor", "model", "cuda", "trt-cold",
                                                        "trt-warm", "trt-ctx", "latency"]


def test_step_runner_stops_at_the_first_failing_step() -> None:
    ran = []

    def ok(name: str):
        return lambda ctx: ran.append(name) or f"{name} done"

    def broken(ctx: object) -> str:
        raise StepFailed("libcudnn.so.9 not found")

    steps = [Step("a", "first", ok("a")), Step("b", "second", broken), Step("c", "third", ok("c"))]
    out = io.StringIO()
    results, status = run_steps(steps, None, [], out)
    assert status == EXIT_FAILED and ran == ["a"]
    assert [r.status for r in results] == ["passed", "FAILED", "not run"]
    assert results[1].detail == "libcudnn.so.9 not found"
    assert "acceptance: stopping before step 3 (third)" in out.getvalue()

    def no_gpu(ctx: object) -> str:
        raise NoGpu("no GPU: CUDAExecutionProvider not available")

    results, status = run_steps([Step("gpu", "gpu", no_gpu), *steps], None, [], io.StringIO())
    assert status == EXIT_NO_GPU and [r.status for r in results] == ["FAILED", "not run", "not run", "not run"]
    results, status = run_steps([steps[0], steps[2]], None, ["a"], io.StringIO())
    assert status == EXIT_OK and [r.status for r in results] == ["skipped", "passed"]


def node(name: str, op: str, provider: str, dur: int = 10) -> dict:
    return {"cat": "Node", "name": f"{name}_kernel_time", "dur": dur, "args": {"op_name": op, "provider": provider}}


def test_provider_placement_from_a_profile() -> None:
    cuda, cpu, trt = "CUDAExecutionProvider", "CPUExecutionProvider", "TensorrtExecutionProvider"
    fence = {"cat": "Node", "name": "MatMul_1_fence_before", "dur": 0, "args": {"op_name": "MatMul"}}
    session = {"cat": "Session", "name": "session_initialization", "dur": 5000, "args": {}}
    good = summarize([session, fence, node("MatMul_1", "MatMul", cuda, 900), node("Shape_2", "Shape", cpu, 5),
                      node("Add_3", "Add", cuda, 95)])
    assert good.nodes == {cuda: 2, cpu: 1} and good.cpu_ops == {"Shape": 1}
    assert good.share(cuda) == pytest.approx(0.995) and placement_problem(good, cuda) == ""
    heavy = summarize([node("MatMul_1", "MatMul", cpu), node("Add_3", "Add", cuda)])
    assert placement_problem(heavy, cuda).startswith("compute on the CPU: MatMul")
    trt_run = summarize([node("TRTKernel_graph_main_0", "TRTKernel_graph_main_0", trt, 5000),
                         node("Shape_2", "Shape", cpu)])
    assert placement_problem(trt_run, trt) == "" and "Tensorrt 1 nodes" in trt_run.describe()
    assert placement_problem(trt_run, cuda).startswith("no node ran on CUDAExecutionProvider")
    assert "no node events" in placement_problem(Placement(), cuda)


def test_placement_reads_a_real_onnxruntime_profile(tmp_path: Path, tone_dir: Path) -> None:
    """The profile format as this onnxruntime writes it (on the CPU here: the check must refuse it)."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    session = ort.InferenceSession(str(tone_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.zeros((1, 20, 560), np.float32), "x_length": np.array([20], np.int32),
                       "language": np.array([0], np.int32), "text_norm": np.array([15], np.int32)})
    placement = load_profile(Path(session.end_profiling()))
    assert placement.nodes.get("CPUExecutionProvider", 0) > 0
    assert "MatMul" in placement.cpu_ops
    assert placement_problem(placement, "CUDAExecutionProvider").startswith("no node ran on CUDAExecutionProvider")


def test_install_plan_honours_the_pins(tmp_path: Path) -> None:
    pins = tmp_path / "gpu-x86_64.txt"
    pins.write_text("# comment\nonnxruntime-gpu==1.26.0\ntensorrt-cu12-libs==10.14.1.48.post1\n"
                    "cuda-toolkit==12.9.2.0\n")
    assert pins_file(tmp_path.parent, "nope") is None
    assert pinned(pins, "onnxruntime-gpu") == "1.26.0" and pinned(pins, "torch") is None
    first, uninstall = install_commands("py", REPO, pins)
    assert first[:5] == ["py", "-m", "pip", "install", "-c"] and first[5] == str(pins)
    assert f"{REPO}[gpu]" in first and "cuda-toolkit[cudart]" in first and "pytest" in first
    assert uninstall == ["py", "-m", "pip", "uninstall", "-y", "onnxruntime"]
    reinstall, trt = finish_commands("py", pins, "1.26.0")
    assert reinstall[-1] == "onnxruntime-gpu==1.26.0" and "--no-deps" in reinstall
    assert trt[-3:] == ["-c", str(pins), "tensorrt-cu12-libs"] and "https://pypi.nvidia.com" in trt
    unpinned = install_commands("py", REPO, None)
    assert "-c" not in unpinned[0] and "cuda-toolkit[cudart]" not in unpinned[0]
    assert len(finish_commands("py", None, "1.26.0")) == 1  # no pins: no TensorRT version to match
    shipped = pins_file(REPO, "x86_64")
    if shipped is not None:  # the image's pins, when the repository has them
        assert pinned(shipped, "onnxruntime-gpu") and install_commands("py", REPO, shipped)[0][5] == str(shipped)


def test_results_table() -> None:
    rows = [("GPU", "NVIDIA H200, compute capability 9.0"), ("TensorRT EP-context load", "3.1 s")]
    table = format_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| measurement") and set(lines[1]) <= {"|", "-"}
    assert lines[2] == "| GPU                      | NVIDIA H200, compute capability 9.0 |"
    row = {"provider": "cuda", "seats": 4, "length": 3.0, "rows": 4, "missing": 0, "p50": 41.2, "p95": 58.9}
    assert latency_value(row) == "final p50 41 ms, p95 59 ms"
    assert latency_value({**row, "missing": 1}) == "final p50 41 ms, p95 - ms, 1/4 incomplete"
    assert latency_value({**row, "p50": None, "p95": None, "missing": 4}) == "no finals (4/4 incomplete)"
    results, _ = run_steps([Step("gpu", "gpu", lambda ctx: "ok")], None, [], io.StringIO())
    summary = summary_rows(results, {"GPU": "x"}, {"TensorRT cold build": "70.0 s"}, [row])
    assert summary[0] == ("GPU", "x") and summary[1][0] == "step 1 gpu" and summary[1][1].startswith("passed")
    assert summary[-1] == ("latency cuda, 4 seats x 3 s", "final p50 41 ms, p95 59 ms")


def test_the_run_and_the_latency_servers_share_one_engine_key(tmp_path: Path, tone_dir: Path) -> None:
    """trt build, the session probes and the TensorRT latency server must compute the same keyed
    directory, or the servers would build again instead of loading the EP-context model."""
    from kitt_stt.config.loader import load_config
    from kitt_stt.config.schema import AppConfig
    from kitt_stt.ops.trt_cache import TrtHost, layout_for_model
    from tests.helpers import TEST_CONFIG, deep_merge
    from utils.gpu.latency import service_overrides

    ctx = acceptance.Context(acceptance.parse_args(["--model", str(tone_dir), "--work", str(tmp_path)]), tmp_path)
    acceptance.write_config(ctx)
    run_config = load_config(ctx.config, env={}).config
    server = AppConfig.model_validate(deep_merge(deep_merge(TEST_CONFIG, {"models": {"cache_dir": str(tmp_path)}}),
                                                 service_overrides(tone_dir, "tensorrt", ctx.trt_cache)))
    host = TrtHost("NVIDIA H200", "9.0", "10.14.1", "1.26.0")
    layouts = [layout_for_model(config.asr, tone_dir / "model.onnx", host) for config in (run_config, server)]
    assert layouts[0].engine_dir == layouts[1].engine_dir and layouts[0].engine_dir.is_relative_to(ctx.trt_cache)


def test_cpu_host_stops_at_the_gpu_step_with_exit_status_3(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / "utils" / "gpu" / "acceptance.sh"), "--work", str(tmp_path / "w"),
                             "--json-out", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60,
                            env=env, cwd=tmp_path)
    assert result.returncode == EXIT_NO_GPU, result.stdout + result.stderr
    assert time.monotonic() - started < 30
    out = result.stdout
    assert "no GPU: CUDAExecutionProvider not available" in out
    assert "acceptance: stopping before step 2 (install the GPU extra" in out
    assert "| step 2 install  | not run |" in out and "exit status 3" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == 3 and [s["status"] for s in report["steps"]][:2] == ["FAILED", "not run"]
    assert not (tmp_path / "w" / "sensevoice-bench").exists() and not (tmp_path / "w" / "trt-cache").exists()


def test_session_probe_loads_what_each_tensorrt_path_loads(tmp_path: Path, tone_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from kitt_stt.config.schema import AsrConfig, Provider
    from kitt_stt.ops import trt_cache
    from tests.test_ort_engine import fake_ep_context, trt_host
    from utils.gpu.session_probe import session_target

    monkeypatch.setattr(trt_cache, "probe_trt_host", lambda device_id: trt_host())
    model = tone_dir / "model.onnx"
    cuda = AsrConfig(provider=Provider.CUDA)
    assert session_target(cuda, model, "plain") == (cuda, model, [])
    asr = AsrConfig(provider=Provider.TENSORRT, tensorrt={"cache_dir": str(tmp_path)})
    with pytest.raises(SystemExit, match="run `kitt-stt trt build` first"):
        session_target(asr, model, "ctx")
    layout = trt_cache.layout_for_model(asr, model)
    fake_ep_context(layout.ep_context_model).write_bytes(b"engine")
    keyed, path, _ = session_target(asr, model, "ctx")
    assert path == layout.ep_context_model and keyed.tensorrt.engine_root() == layout.engine_dir
    keyed, path, engines = session_target(asr, model, "warm")
    assert path == model and engines == [layout.engine_dir / "TRTKernel_graph_sm89.engine"]
