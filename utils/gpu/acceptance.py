"""GPU acceptance: install the GPU build, prove the CUDA and TensorRT providers really run the
model, time the three TensorRT start-up paths, and measure final latency on CUDA and TensorRT.

    utils/gpu/acceptance.sh                      # everything (about 8 minutes on a fast link)
    utils/gpu/acceptance.sh --skip-install --model /models/sensevoice --skip latency

Steps, stopping at the first failure: (1) a GPU is visible, (2) pip install the ``gpu`` extra
with deployment/pins/gpu-<machine>.txt, (3) ``kitt-stt doctor`` on the TensorRT configuration,
(4) the SenseVoice-shaped benchmark model (``--model DIR`` to bring one), (5) a CUDA session:
``get_providers()`` and the profile's node placement, (6) a cold TensorRT build (``kitt-stt trt
build`` into an empty keyed cache), (7) a cache-warm load, (8) the EP-context load, (9) final
latency, 4 seats x 3/15/30 s, on CUDA and on TensorRT. Then one table. Exit status: 0 all passed,
1 a step failed, 3 no GPU (a CPU host stops at step 1, before installing or building anything).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import shutil
import site
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from utils.gpu.install import finish_commands, install_commands, pins_file  # noqa: E402
from utils.gpu.latency import service_overrides  # noqa: E402
from utils.gpu.steps import NoGpu, Step, StepFailed, run_steps  # noqa: E402
from utils.gpu.summary import format_table, summary_rows  # noqa: E402

STEP_TIMEOUT_S = 600


@dataclass
class Context:
    args: argparse.Namespace
    work: Path
    python: str = sys.executable
    facts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, str] = field(default_factory=dict)
    latency: list[dict[str, Any]] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)

    @property
    def model_dir(self) -> Path:
        return self.args.model or self.work / "sensevoice-bench"

    @property
    def trt_cache(self) -> Path:
        return self.work / "trt-cache"

    @property
    def config(self) -> Path:
        return self.work / "trt.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="SenseVoice directory with model.onnx (default: build "
                                                     "sensevoice-bench into WORK, ~1 min, needs torch and ~5 GB)")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "gpu-acceptance",
                        help="working directory: model, TensorRT cache, logs (default: .cache/gpu-acceptance)")
    parser.add_argument("--skip-install", action="store_true", help="use the environment as it is (GPU images)")
    parser.add_argument("--pins", type=Path, help="pip constraints (default: deployment/pins/gpu-<machine>.txt)")
    parser.add_argument("--device-id", type=int, default=0)
    parser.add_argument("--seats", type=int, default=4)
    parser.add_argument("--lengths", type=float, nargs="+", default=[3.0, 15.0, 30.0])
    parser.add_argument("--keep-cache", action="store_true", help="do not empty the TensorRT cache before step 6")
    parser.add_argument("--skip", action="append", default=[], metavar="STEP", help="skip a step by name (repeatable)")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if args.skip_install:
        args.skip.append("install")
    unknown = sorted(set(args.skip) - {step.name for step in STEPS})
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(step.name for step in STEPS)}")
    return args


# ----- helpers -----------------------------------------------------------------------------------

def run(command: list[str], timeout: float = STEP_TIMEOUT_S, echo: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a child with this process's environment; a non-zero exit is a failed step."""
    if echo:
        print("  $ " + " ".join(command), flush=True)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{' '.join(command[:4])} ... did not finish in {timeout:.0f} s") from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StepFailed(f"{' '.join(command[:5])} ... exited {result.returncode}:\n{tail}")
    return result


def export_gpu_library_path() -> None:
    """NVIDIA's wheels' library folders on LD_LIBRARY_PATH for every child (as the GPU image sets it);
    the dynamic loader reads it at process start, so it serves the children, not this process."""
    folders = []
    for root in dict.fromkeys(site.getsitepackages()):
        folders += sorted(str(path) for path in Path(root).glob("nvidia/*/lib") if path.is_dir())
        if (Path(root) / "tensorrt_libs").is_dir():
            folders.append(str(Path(root) / "tensorrt_libs"))
    current = [entry for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":") if entry]
    os.environ["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys(folders + current))


def provider_state() -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed"
    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" in providers:
        return f"onnxruntime {ort.__version__} has CUDAExecutionProvider"
    return f"CUDAExecutionProvider not available (onnxruntime {ort.__version__} offers {', '.join(providers)})"


def session_probe(ctx: Context, provider: str, mode: str) -> dict[str, Any]:
    result = subprocess.run([ctx.python, str(REPO / "utils" / "gpu" / "session_probe.py"), "--config", str(ctx.config),
                             "--model", str(ctx.model_dir), "--provider", provider, "--mode", mode],
                            capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StepFailed(f"session probe ({provider}, {mode}) exited {result.returncode}:\n{tail}")
    probe: dict[str, Any] = json.loads(lines[-1])
    ctx.probes[f"{provider}-{mode}"] = probe
    if probe["problem"]:
        raise StepFailed(f"{provider} ({mode}): {probe['problem']}")
    return probe


# ----- steps -------------------------------------------------------------------------------------

def step_gpu(ctx: Context) -> str:
    from kitt_stt.ops.gpu import probe_gpus

    probe = probe_gpus()
    gpu = probe.device(ctx.args.device_id)
    if gpu is None:
        seen = probe.summary() if probe.gpus else "; ".join(probe.problems)
        raise NoGpu(f"no GPU: {provider_state()}; no NVIDIA device {ctx.args.device_id} is visible ({seen})")
    ctx.facts["GPU"] = f"{gpu.name}, compute capability {gpu.compute_capability} ({probe.source})"
    return f"{ctx.facts['GPU']}; {provider_state()}"


def step_install(ctx: Context) -> str:
    pins = ctx.args.pins or pins_file(REPO)
    if pins is None and platform.machine() != "x86_64":
        raise StepFailed(f"no deployment/pins/gpu-{platform.machine()}.txt: PyPI's GPU wheels are x86-64 builds; on a "
                         "Jetson use the Orin image (Dockerfile.orin) or NVIDIA's JetPack wheel, then --skip-install")
    for command in install_commands(ctx.python, REPO, pins):
        run(command)  # `pip uninstall` of a package that is not there only warns
    version = run([ctx.python, "-c", "import importlib.metadata as m; print(m.version('onnxruntime-gpu'))"],
                  echo=False).stdout.strip()
    for command in finish_commands(ctx.python, pins, version):
        run(command)
    importlib.invalidate_caches()
    export_gpu_library_path()
    providers = run([ctx.python, "-c", "import onnxruntime as o; print(','.join(o.get_available_providers()))"],
                    echo=False).stdout.strip().split(",")
    missing = [name for name in ("CUDAExecutionProvider", "TensorrtExecutionProvider") if name not in providers]
    if missing:
        raise StepFailed(f"after the install onnxruntime still lacks {', '.join(missing)} (it has {providers})")
    return f"onnxruntime-gpu {version} ({'pins ' + pins.name if pins else 'no pins file'})"


def step_doctor(ctx: Context) -> str:
    export_gpu_library_path()
    result = subprocess.run([ctx.python, "-m", "kitt_stt", "doctor", "--config", str(ctx.config)],
                            capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO)
    print("\n".join("  | " + line for line in result.stdout.rstrip().splitlines()), flush=True)
    verdict = (result.stdout.strip().splitlines() or [result.stderr.strip()])[-1]
    if result.returncode != 0:
        raise StepFailed(f"kitt-stt doctor exited {result.returncode}: {verdict}")
    return verdict


def step_model(ctx: Context) -> str:
    directory = ctx.model_dir
    if not (directory / "model.onnx").is_file():
        if ctx.args.model:
            raise StepFailed(f"{directory}: no model.onnx (TensorRT builds from the fp32 model)")
        if importlib.util.find_spec("torch") is None:
            raise StepFailed("building sensevoice-bench needs torch (CPU is enough: pip install torch --index-url "
                             "https://download.pytorch.org/whl/cpu), or pass --model DIR")
        staging = directory.with_name(directory.name + ".building")
        shutil.rmtree(staging, ignore_errors=True)
        run([ctx.python, "-m", "kitt_stt", "models", "build", "sensevoice-bench", "--out", str(staging)])
        staging.rename(directory)
    run([ctx.python, "-c", "import sys; from pathlib import Path; from kitt_stt.asr.sense_voice_model import "
         "load_sense_voice_model as l; print(l(Path(sys.argv[1]), prefer_int8=False).model_path)", str(directory)],
        echo=False)
    size = (directory / "model.onnx").stat().st_size
    ctx.facts["model"] = f"{directory} (model.onnx, {size / 1e6:.0f} MB)"
    return ctx.facts["model"]


def placed_session(ctx: Context, provider: str, mode: str, timing: str, fact: str) -> dict[str, Any]:
    """A session probe whose create time and node placement go into the report."""
    probe = session_probe(ctx, provider, mode)
    ctx.timings[timing] = f"{probe['create_s']:.1f} s"
    ctx.facts[fact] = probe["placement"]
    return probe


def step_cuda(ctx: Context) -> str:
    probe = placed_session(ctx, "cuda", "plain", "CUDA session create", "CUDA placement")
    return f"{probe['providers'][0]}; {probe['placement']}"


def step_trt_cold(ctx: Context) -> str:
    if not ctx.args.keep_cache:
        shutil.rmtree(ctx.trt_cache, ignore_errors=True)
    started = time.perf_counter()
    result = run([ctx.python, "-m", "kitt_stt", "trt", "build", "--config", str(ctx.config)])
    seconds = time.perf_counter() - started
    kept = " (--keep-cache: not a cold build)" if ctx.args.keep_cache else ""
    ctx.timings["TensorRT cold build (kitt-stt trt build)"] = f"{seconds:.1f} s{kept}"
    lines = result.stdout.strip().splitlines()
    return next((line for line in lines if line.startswith(("wrote", "already"))), f"{seconds:.1f} s")


def step_trt_warm(ctx: Context) -> str:
    probe = session_probe(ctx, "tensorrt", "warm")
    reused = "engine reused" if probe["engines_reused"] else "engine rebuilt, not reused"
    ctx.timings["TensorRT cache-warm load"] = f"{probe['create_s']:.1f} s ({reused})"
    return f"{probe['create_s']:.1f} s, {reused}; {probe['placement']}"


def step_trt_ctx(ctx: Context) -> str:
    probe = placed_session(ctx, "tensorrt", "ctx", "TensorRT EP-context load", "TensorRT placement")
    return f"{probe['create_s']:.1f} s; {probe['placement']}"


def step_latency(ctx: Context) -> str:
    from utils.gpu.latency import measure

    for provider in ("cuda", "tensorrt"):
        work = ctx.work / f"latency-{provider}"
        work.mkdir(parents=True, exist_ok=True)
        try:
            ctx.latency += measure(provider, ctx.model_dir, ctx.trt_cache, work, ctx.args.seats, ctx.args.lengths)
        except (RuntimeError, OSError, ImportError) as exc:
            raise StepFailed(f"latency on {provider}: {exc}") from None
    incomplete = sum(row["missing"] for row in ctx.latency)
    if incomplete:
        raise StepFailed(f"{incomplete} seat rounds without exactly one final")
    return f"{len(ctx.latency)} rows"


STEPS = (
    Step("gpu", "a GPU is visible", step_gpu),
    Step("install", "install the GPU extra (pins honoured)", step_install),
    Step("doctor", "kitt-stt doctor on the TensorRT configuration", step_doctor),
    Step("model", "the SenseVoice-shaped benchmark model", step_model),
    Step("cuda", "CUDA session: providers and node placement", step_cuda),
    Step("trt-cold", "cold TensorRT build into an empty keyed cache", step_trt_cold),
    Step("trt-warm", "cache-warm TensorRT load", step_trt_warm),
    Step("trt-ctx", "EP-context load", step_trt_ctx),
    Step("latency", "final latency on CUDA and TensorRT", step_latency),
)


def write_config(ctx: Context) -> None:
    """The run's configuration: trt build, the session probes and the latency servers share its
    TensorRT settings, so they all compute the same engine key."""
    ctx.work.mkdir(parents=True, exist_ok=True)
    config = {"models": {"cache_dir": str(ctx.work / "models")}, **service_overrides(ctx.model_dir, "tensorrt",
                                                                                     ctx.trt_cache)}
    config["asr"]["tensorrt"]["cache_dir"] = str(ctx.trt_cache)
    config["asr"]["cuda"] = {"device_id": ctx.args.device_id}
    ctx.config.write_text(yaml.safe_dump(config))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = Context(args, args.work.absolute())
    started = time.monotonic()
    write_config(ctx)
    export_gpu_library_path()  # again after the install; here for runs that skip it
    results, status = run_steps(STEPS, ctx, args.skip, sys.stdout)
    print()
    print(format_table(summary_rows(results, ctx.facts, ctx.timings, ctx.latency)), end="")
    print(f"\nacceptance: {'passed' if status == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s "
          f"(exit status {status})")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "status": status, "facts": ctx.facts, "timings": ctx.timings, "latency": ctx.latency,
            "probes": ctx.probes, "steps": [{"step": r.step.name, "status": r.status, "seconds": round(r.seconds, 1),
                                             "detail": r.detail} for r in results]}, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
