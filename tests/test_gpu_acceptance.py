"""The GPU acceptance kit's parts that run without a GPU: the CUDA-major detection from a wheel,
the preflight's messages (and that a CUDA run here stops within 10 s naming what is missing),
the step runner's budgets, the provider-placement check on profiles, the agreement measure, the
summary built from a cut-off run, and the session probe's TensorRT paths. The offline install
and the CPU arm end to end are in test_gpu_offline.py."""

from __future__ import annotations

import ctypes
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gpu_fixtures import fake_ort_wheel, write_wheel
from utils.gpu import record
from utils.gpu.agreement import compare, edit_distance
from utils.gpu.arm import layout
from utils.gpu.placement import Placement, load_profile, placement_problem, summarize
from utils.gpu.preflight import Plan, run_preflight
from utils.gpu.requirements import unsatisfied
from utils.gpu.steps import EXIT_FAILED, EXIT_MISSING, EXIT_OK, Missing, Step, StepFailed, run_steps
from utils.gpu.summary import build
from utils.gpu.wheels import cuda_version_from_build_info, installed_cuda_version, parse_wheel_name, wheel_cuda_version

REPO = Path(__file__).resolve().parents[1]


def has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_the_cuda_major_is_read_from_inside_the_wheel(tmp_path: Path) -> None:
    cu13 = fake_ort_wheel(tmp_path, "1.31.1", "13.0")
    cu12 = fake_ort_wheel(tmp_path, "1.26.0", "12.8")
    cpu = write_wheel(tmp_path / "onnxruntime-1.32.0-py3-none-any.whl", "onnxruntime", "1.32.0",
                      {"onnxruntime/capi/build_and_package_info.py": b"package_name = 'onnxruntime'\n"})
    assert (wheel_cuda_version(cu13), wheel_cuda_version(cu12), wheel_cuda_version(cpu)) == ("13.0", "12.8", None)
    parsed = parse_wheel_name(cu13)
    assert parsed is not None and (parsed.name, parsed.version) == ("onnxruntime-gpu", "1.31.1")
    assert cuda_version_from_build_info("cuda_version = \"12.9\"\n") == "12.9"
    assert cuda_version_from_build_info("# cuda_version = '12.9'\n") is None
    installed = tmp_path / "site" / "onnxruntime" / "capi"
    installed.mkdir(parents=True)
    (installed.parent / "__init__.py").write_text("")
    (installed / "build_and_package_info.py").write_text("package_name = 'onnxruntime-gpu'\ncuda_version = '13.0'\n")
    assert installed_cuda_version([str(tmp_path / "empty"), str(tmp_path / "site")])[:2] == ("onnxruntime-gpu", "13.0")


def test_requirements_are_checked_with_markers_and_versions() -> None:
    versions = {"numpy": "1.26.4", "pyyaml": "6.0.2"}
    assert unsatisfied(["numpy>=1.24", "PyYAML>=6.0"], versions) == []
    assert unsatisfied(["numpy>=2"], versions) == ["numpy>=2 (has 1.26.4)"]
    assert unsatisfied(["fastapi>=0.110"], versions) == ["fastapi>=0.110 (not installed)"]
    assert unsatisfied(['tomli; python_version < "3.0"'], versions) == []


@pytest.mark.skipif(has_driver(), reason="this host has an NVIDIA driver")
def test_preflight_names_each_missing_gpu_part(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_ort_wheel(wheels, "1.26.0", "12.8")
    report = run_preflight(Plan(["cpu", "cuda"], False, wheels, tmp_path / "site", tmp_path / "work",
                                tmp_path / "no-model", tmp_path / "no-turnsense"))
    missing = "\n".join(report.missing)
    assert report.seconds < 10
    assert "NVIDIA driver: libcuda.so.1" in missing
    ok = {what: detail for passed, what, detail in report.checks if passed}
    assert "built for CUDA 12.8" in ok["onnxruntime-gpu"] and wheels.name in ok["onnxruntime-gpu"]
    for soname in ("libcublas.so.12", "libcudnn.so.9", "libcufft.so.11"):  # what a CUDA 12 build links
        assert soname in missing or any(soname in detail for detail in ok.values())
    assert f"model: {tmp_path / 'no-model'} lacks model.onnx, tokens.txt" in missing
    assert f"TurnSense: {tmp_path / 'no-turnsense'} has no smart-turn-v3.2-cpu.onnx" in missing
    assert report.facts["TensorRT"].startswith("not measured")  # not asked for: not an error
    strict = run_preflight(Plan(["cuda", "tensorrt"], True, wheels, tmp_path / "site", tmp_path / "work", None, None))
    assert any(item.startswith("TensorRT 10: libnvinfer.so.10 not found") for item in strict.missing)
    cpu_only = run_preflight(Plan(["cpu"], False, None, tmp_path / "site", tmp_path / "work", None, None,
                                  build_bench=False))
    assert not any("driver" in item or "CUDA" in item for item in cpu_only.missing)


def test_preflight_reports_unreadable_or_foreign_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"half a copy")
    (wheels / "nvidia_cudnn_cu13-9.28.1.4-py3-none-manylinux_2_27_x86_64.whl.parts.json").write_text("{}")
    report = run_preflight(Plan(["cuda"], False, wheels, tmp_path / "site", tmp_path / "work", None, None,
                                build_bench=False))
    missing = "\n".join(report.missing)
    assert "is not a readable wheel" in missing and "stage join" in missing
    pieces = "nvidia_cudnn_cu13-9.28.1.4-py3-none-manylinux_2_27_x86_64.whl.parts.json"
    assert f"1 files still in pieces ({pieces}, ...): run `python -m utils.gpu.stage join {wheels}`" in missing
    if sys.version_info[:2] != (3, 12):
        assert "wheels for another Python than" in missing and "--python" in missing


@pytest.mark.skipif(has_driver(), reason="this host has an NVIDIA driver")
def test_a_cuda_run_here_stops_within_10_s_naming_what_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / "utils" / "gpu" / "acceptance.sh"), "--offline", "--providers", "cuda",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60, env=env)
    assert time.monotonic() - started < 10
    assert result.returncode == EXIT_MISSING, result.stdout + result.stderr
    out = result.stdout
    assert "MISSING NVIDIA driver: libcuda.so.1" in out and "MISSING onnxruntime-gpu: not installed" in out
    assert "libcudnn.so.9" in out and "acceptance: stopping: preflight" in out
    lines = record.read(tmp_path / "out")
    preflight = next(line for line in lines if line["kind"] == "preflight")
    assert not preflight["ok"] and any("libcuda.so.1" in item for item in preflight["missing"])
    steps = {line["step"]: line["status"] for line in lines if line["kind"] == "step"}
    assert steps["preflight"] == "FAILED" and steps["ab"] == "not run"
    assert "## 8 · Steps" in (tmp_path / "out" / "table.md").read_text()
    assert not (tmp_path / "out" / "site").exists()  # nothing was installed


def test_step_runner_budgets_and_fatal_steps() -> None:
    ran: list[str] = []
    limits: dict[str, float] = {}

    def ok(name: str):
        def run(ctx: object, limit: float) -> str:
            ran.append(name)
            limits[name] = limit
            return f"{name} done"
        return run

    def broken(ctx: object, limit: float) -> str:
        raise StepFailed("libcudnn.so.9 not found")

    def slow(ctx: object, limit: float) -> str:
        time.sleep(0.3)
        return "slow"

    seen = []
    steps = [Step("a", "first", 100, ok("a")), Step("b", "second", 100, broken), Step("c", "third", 100, ok("c"))]
    results, status = run_steps(steps, None, 50, io.StringIO(), seen.append)
    assert status == EXIT_FAILED and ran == ["a", "c"]  # a failure that is not fatal: the next step runs
    assert [r.status for r in results] == ["passed", "FAILED", "passed"] and seen == results
    assert limits["a"] <= 50  # a step's limit never exceeds what is left of the run's budget
    fatal = [Step("a", "first", 1, ok("a")), Step("b", "second", 1, broken, fatal=True), Step("c", "third", 1, ok("c"))]
    results, status = run_steps(fatal, None, 50, io.StringIO(), lambda r: None)
    assert status == EXIT_FAILED and [r.status for r in results] == ["passed", "FAILED", "not run"]

    def missing(ctx: object, limit: float) -> str:
        raise Missing("libcuda.so.1")

    results, status = run_steps([Step("p", "pre", 1, missing, fatal=True), *steps], None, 50, io.StringIO(),
                                lambda r: None)
    assert status == EXIT_MISSING and results[1].status == "not run"
    out = io.StringIO()
    results, status = run_steps([Step("s", "slow", 10, slow), Step("t", "next", 10, ok("t"))], None, 5.2, out,
                                lambda r: None)
    assert status == EXIT_OK and results[1].status == "skipped" and "budget of 5 s is spent" in results[1].detail
    results, _ = run_steps([Step("x", "n/a", 1, ok("x"), skip_reason=lambda ctx: "no GPU provider")], None, 9,
                           io.StringIO(), lambda r: None)
    assert results[0].status == "skipped" and results[0].detail == "no GPU provider"


def test_seats_go_over_several_connections() -> None:
    assert layout(4) == (2, 2) and layout(16) == (4, 4) and layout(64) == (8, 8) and layout(2) == (2, 1)


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
    encoder = summarize([node("/encoder/encoders.0/self_attn/MatMul", "MatMul", cuda, 50),
                         node("/encoder/encoders.0/norm1/LayerNormalization", "LayerNormalization", cpu, 5)])
    assert encoder.encoder == {cuda: 1, cpu: 1} and "encoder nodes: CPU 1, CUDA 1" in encoder.describe()
    assert placement_problem(encoder, cuda).startswith("encoder nodes ran on the CPU")


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


def test_agreement_measures_token_matches_and_character_errors() -> None:
    assert edit_distance("打开车门", "打开车窗") == 1 and edit_distance("", "ab") == 2
    cpu = {"provider": "cpu", "clips": {"a": {"tokens": ["打", "开"], "text": "打开"},
                                        "b": {"tokens": ["车", "门"], "text": "车门"}}}
    same = compare(cpu, {**cpu, "provider": "cuda"})
    assert (same["exact"], same["exact_rate"], same["cer"], same["within_tolerance"]) == (2, 1.0, 0.0, True)
    flipped = {"provider": "cuda", "clips": {**cpu["clips"], "b": {"tokens": ["车", "窗"], "text": "车窗"}}}
    result = compare(cpu, flipped)
    assert result["exact_rate"] == 0.5 and result["cer"] == 0.25 and not result["within_tolerance"]
    assert result["differs"] == ["b"]
    trt = compare(cpu, {**flipped, "provider": "tensorrt"})  # fp16: a stated, wider tolerance, still exceeded
    assert trt["tolerance"] == {"exact_rate": 0.6, "cer": 0.05} and not trt["within_tolerance"]


def cell(provider: str, seats: int, length: float, p50: float) -> dict:
    stats = {"p50": p50, "p95": p50 * 1.5, "n": seats * 5}
    return {"kind": "cell", "step": "ab", "provider": provider, "seats": seats, "connections": 2, "length_s": length,
            "rounds": 5, "samples": seats * 5, "missing": 0, "final_ms": stats, "server_ms": stats,
            "commit_ms": stats, "memory": {"vmhwm_mib": 900.0, "gpu_mib": 1500.0}, "memory_ready": {"vmrss_mib": 800.0}}


def test_the_summary_is_built_from_whatever_a_cut_run_left(tmp_path: Path) -> None:
    record.append(tmp_path, "run", rounds=5, warmup=1, seats=4, parallel=True, host={"python": "3.12.3", "cpus": 16,
                                                                                      "gpus": ["NVIDIA H200"]})
    record.append(tmp_path, "step", number=1, step="preflight", status="passed", seconds=0.4, limit_s=10, detail="ok")
    for provider, p50 in (("cpu", 400.0), ("cuda", 50.0)):
        record.append(tmp_path, **cell(provider, 4, 3.0, p50))
    record.append(tmp_path, **cell("cpu", 4, 15.0, 900.0))
    with (tmp_path / record.RESULTS).open("a") as handle:
        handle.write('{"kind": "cell", "provider": "cuda", "seats": 4, "len')  # the cut came mid-line
    table = build(record.read(tmp_path))
    assert "- 4 seats x 3 s: CPU p50 400 ms; cuda 50 ms (CPU / cuda: 8.00x)" in table
    assert "| 4 | 3 s | 2 | 400 / 600 (n=20) | 50 / 75 (n=20) | - | 8.00x | - |" in table
    assert "| 4 | 15 s | 2 | 900 / 1350 (n=20) | - | - | - | - |" in table
    assert "| cuda | 4 | 3 s | 800 | 900 | 1500 |" in table
    assert "The run ended before its last step" in table and "| 1 | preflight | passed |" in table


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
    layout_ = trt_cache.layout_for_model(asr, model)
    fake_ep_context(layout_.ep_context_model).write_bytes(b"engine")
    keyed, path, _ = session_target(asr, model, "ctx")
    assert path == layout_.ep_context_model and keyed.tensorrt.engine_root() == layout_.engine_dir
    keyed, path, engines = session_target(asr, model, "warm")
    assert path == model and engines == [layout_.engine_dir / "TRTKernel_graph_sm89.engine"]


def test_the_run_configuration_is_config_k8s_with_only_the_host_parts_changed(tmp_path: Path, tone_dir: Path) -> None:
    from kitt_stt.config.loader import load_config
    from utils.gpu.server import run_config

    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(run_config(tone_dir, "cuda", tmp_path / "trt", tmp_path / "ts", tmp_path / "m", 8)))
    config = load_config(path, env={}).config
    production = load_config(REPO / "config-k8s.yaml", env={}).config
    assert (config.asr.max_batch, config.asr.workers) == (production.asr.max_batch, production.asr.workers) == (8, 4)
    assert config.turn.model == str(tmp_path / "ts") and production.turn.model == "turnsense"
    # the VAD too, but for the engine: the tone workload is not speech to Silero (utils/gpu/server.py)
    assert config.vad.engine.value == "webrtc" and production.vad.engine.value == "silero"
    assert config.vad.model_copy(update={"engine": production.vad.engine}) == production.vad
    assert config.server.rate_limit == production.server.rate_limit
    assert config.asr.provider.value == "cuda" and config.server.host == "127.0.0.1"


def test_agreement_decodes_the_clips_with_the_service_engine(tmp_path: Path, tone_dir: Path) -> None:
    """The decode half on the CPU (the GPU providers run the same code): the tone clips come back as
    the tone phrase, alone and batched, and a provider compared with itself agrees exactly."""
    from utils.gpu.server import run_config

    config = tmp_path / "cpu.yaml"
    config.write_text(json.dumps(run_config(tone_dir, "cpu", tmp_path / "trt", None, tmp_path / "m", 8)))
    out = tmp_path / "cpu.json"
    result = subprocess.run([sys.executable, "-m", "utils.gpu.agreement", "decode", "--provider", "cpu", "--model",
                             str(tone_dir), "--config", str(config), "--out", str(out)], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    decoded = json.loads(out.read_text())
    clips = decoded["clips"]
    assert len(clips) == 10 and clips["tone 3 s"]["text"] == "打开车门" * 2
    assert clips["tone 15 s (batch)"]["tokens"] == clips["tone 15 s"]["tokens"] != []
    same = compare(decoded, {**decoded, "provider": "cuda"})
    assert (same["exact"], same["cer"], same["within_tolerance"]) == (10, 0.0, True)


def test_which_steps_apply_to_which_providers(tmp_path: Path) -> None:
    from utils.gpu import acceptance

    def context(argv: list[str], tensorrt_found: bool) -> acceptance.Context:
        args = acceptance.parse_args(["--out", str(tmp_path), *argv])
        providers = args.providers.split(",") if args.providers else list(acceptance.PROVIDERS)
        ctx = acceptance.Context(args, tmp_path, providers, bool(args.providers) and "tensorrt" in providers)
        ctx.report.tensorrt = tensorrt_found
        ctx.report.facts["TensorRT"] = "not measured: libnvinfer.so.10 not found"
        return ctx

    default = context([], tensorrt_found=False)  # tensorrt where present: here it is not
    assert default.gpu_providers() == ["cuda"] and acceptance.no_gpu(default) == ""
    assert acceptance.no_trt(default) == "not measured: libnvinfer.so.10 not found"
    assert context([], tensorrt_found=True).gpu_providers() == ["cuda", "tensorrt"]
    asked = context(["--providers", "cpu,tensorrt"], tensorrt_found=False)  # asked for: its absence is the preflight's
    assert asked.gpu_providers() == ["tensorrt"] and acceptance.no_trt(asked) == ""
    assert acceptance.trt_not_built(asked) == "trt-build did not pass"
    cpu = context(["--providers", "cpu"], tensorrt_found=False)
    assert acceptance.no_gpu(cpu) and acceptance.only_cpu(cpu)
    assert acceptance.no_trt(cpu) == "tensorrt not in --providers"
    # the A/B's limit is its plan in real time: 5 rounds of 3 + 15 + 30 s, a warm-up, the server start, slack
    plan = acceptance.arm_seconds(default, [4], [3.0, 15.0, 30.0])
    assert plan == pytest.approx(60 + 1.2 * (5 * (48 + 3 * 3.5) + (3 + 3.5)))
    with pytest.raises(SystemExit):
        acceptance.parse_args(["--out", str(tmp_path), "--providers", "cpu,rocm"])
    relative = acceptance.parse_args(["--out", "out", "--model", "models/sv"])  # children run in the repository
    assert relative.out == Path.cwd() / "out" and relative.model == Path.cwd() / "models" / "sv"
    assert acceptance.core_split(1) == [None]


def test_the_session_probe_step_records_its_placement(tmp_path: Path, tone_dir: Path) -> None:
    """The probe the GPU steps run, here on the CPU: its own process, the session's providers and
    the profile's placement recorded as a JSON line and shown in the table."""
    from utils.gpu import acceptance

    args = acceptance.parse_args(["--out", str(tmp_path), "--providers", "cpu", "--model", str(tone_dir),
                                  "--turnsense", str(tmp_path / "ts")])
    ctx = acceptance.Context(args, tmp_path, ["cpu"], False)
    result = acceptance.probe(ctx, "cpu", "plain", 60)
    assert result["providers"] == ["CPUExecutionProvider"] and result["problem"] == ""
    assert result["nodes"]["CPUExecutionProvider"] > 0 and result["create_s"] >= 0
    placed = [line for line in record.read(tmp_path) if line["kind"] == "placement"]
    assert len(placed) == 1 and placed[0]["mode"] == "plain"
    assert "| CPUExecutionProvider | plain | CPUExecutionProvider | CPU " in build(record.read(tmp_path))
