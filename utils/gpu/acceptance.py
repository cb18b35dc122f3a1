"""GPU acceptance: one offline run that gives a CPU / CUDA / TensorRT A/B table of the service on
its production settings, with the most valuable rows first and every result on disk as it comes.

    utils/gpu/acceptance.sh --offline --wheels WHEELS --out OUT          # the GPU host (about 8 min)
    utils/gpu/acceptance.sh --offline --providers cpu --out OUT           # the CPU arm alone
    python -m utils.gpu.summary OUT                                       # the table, from whatever exists

Steps, in this order, each with its time limit (sized for an H100/H200-class host) under one
total budget (``--budget-s``, 480): ``preflight`` (< 10 s: every missing thing by name; exit 2),
``install`` (the wheel folder into a private target folder, ``--no-index``), ``models`` (TurnSense
from the staged wheel; sensevoice-bench built unless ``--model DIR``), ``ab`` (CPU and CUDA arms
side by side on disjoint CPU cores: 4 seats x 3/15/30 s, 5 rounds after a warm-up), ``placement``
(the CUDA session's providers and its profile), ``trt-build`` (cold build, cache-warm and
EP-context loads, timed), ``trt`` (the TensorRT arm, same cells), ``scale`` (16 and 64 seats, GPU
arms), ``agreement`` (token sequences of every provider against the CPU's). TensorRT steps run
where its libraries exist (or when ``--providers`` names it: then their absence is an error).

This process needs only the standard library: everything that imports the project's
dependencies runs as a child, with the private target folder first on ``PYTHONPATH`` and the
NVIDIA wheels' library folders on ``LD_LIBRARY_PATH``. Exit status: 0 every step that ran passed,
1 a step failed, 2 the preflight found something missing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from utils.gpu import record  # noqa: E402
from utils.gpu.children import Child, child_env, core_split, start, wait_all  # noqa: E402
from utils.gpu.install import install_offline  # noqa: E402
from utils.gpu.preflight import TURNSENSE_FILE, Plan, Report, find_model, run_preflight  # noqa: E402
from utils.gpu.server import run_config  # noqa: E402
from utils.gpu.steps import EXIT_OK, Missing, Step, StepFailed, StepResult, run_steps  # noqa: E402
from utils.gpu.summary import write_table  # noqa: E402

PROVIDERS = ("cpu", "cuda", "tensorrt")
BUDGET_S = 480
#: Wall time of one round beyond its audio: 2 s pre-roll, start sync, the commit after the final
#: (TurnSense, else asr's 1.5 s silence fallback); measured 3.2 s here on the tone model.
ROUND_OVERHEAD_S = 3.5
SERVER_START_S = 60  # model load and warm-up until /readyz (a TensorRT EP-context load: ~10 s)
PLAN_SLACK = 1.2


@dataclass
class Context:
    args: argparse.Namespace
    out: Path
    providers: list[str]
    tensorrt_required: bool
    report: Report = field(default_factory=Report)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    built_trt: bool = False

    @property
    def work(self) -> Path:
        return self.out / "work"

    @property
    def target(self) -> Path:
        return self.args.target or self.out / "site"

    @property
    def model(self) -> Path:
        return self.args.model or find_model("sensevoice-bench", self.work, "model.onnx") or \
            self.work / "models" / "sensevoice-bench"

    @property
    def turnsense(self) -> Path:
        return self.args.turnsense or find_model("turnsense", self.work, TURNSENSE_FILE) or \
            self.work / "models" / "turnsense"

    @property
    def trt_cache(self) -> Path:
        return self.work / "trt-cache"

    def gpu_providers(self) -> list[str]:
        return [p for p in self.providers if p != "cpu" and (p != "tensorrt" or self.report.tensorrt
                                                             or self.tensorrt_required)]

    def python(self) -> str:
        return sys.executable

    def start(self, name: str, command: list[str], limit: float, cores: list[int] | None = None) -> Child:
        env = child_env(self.env, self.target, self.report.library_dirs, self.args.offline)
        return start(name, command, limit, self.work / "logs", env, cores)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results (results.jsonl, table.md) and work files")
    parser.add_argument("--offline", action="store_true", help="never reach an index (pip gets --no-index)")
    parser.add_argument("--wheels", type=Path, help="the staged wheel folder (stage download; joined)")
    parser.add_argument("--target", type=Path, help="private install folder (default OUT/site)")
    parser.add_argument("--providers", help="comma list of cpu,cuda,tensorrt (default: cpu,cuda and tensorrt "
                                            "where its libraries exist)")
    parser.add_argument("--model", type=Path, help="a SenseVoice directory (model.onnx, tokens.txt); default: "
                                                   "build sensevoice-bench (needs torch)")
    parser.add_argument("--turnsense", type=Path, help="a TurnSense directory (default: from the wheel folder)")
    parser.add_argument("--seats", type=int, default=4, help="seats of the A/B cells")
    parser.add_argument("--lengths", type=float, nargs="+", default=[3.0, 15.0, 30.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--scale-seats", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--scale-lengths", type=float, nargs="+", default=[15.0])
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="total time budget (default 480)")
    parser.add_argument("--sequential", action="store_true", help="run the A/B arms one after another")
    parser.add_argument("--device-id", type=int, default=0)
    args = parser.parse_args(argv)
    if args.providers:
        unknown = set(args.providers.split(",")) - set(PROVIDERS)
        if unknown:
            parser.error(f"unknown provider(s) {', '.join(sorted(unknown))}; choose from {', '.join(PROVIDERS)}")
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    for name in ("out", "wheels", "target", "model", "turnsense"):  # children run in the repository
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).absolute())
    return args


# ----- children ----------------------------------------------------------------------------------

def run_once(ctx: Context, name: str, command: list[str], limit: float) -> str:
    child = ctx.start(name, command, limit)
    problems = wait_all([child])
    if problems:
        raise StepFailed("; ".join(problems))
    return child.log.read_text(errors="replace")


def arms(ctx: Context, step: str, providers: list[str], seats: list[int], lengths: list[float], limit: float,
         parallel: bool) -> str:
    base = [ctx.python(), "-m", "utils.gpu.arm", "--model", str(ctx.model), "--turnsense", str(ctx.turnsense),
            "--trt-cache", str(ctx.trt_cache), "--work", str(ctx.work), "--out", str(ctx.out), "--step", step,
            "--seats", *map(str, seats), "--lengths", *map(str, lengths), "--rounds", str(ctx.args.rounds),
            "--warmup", str(ctx.args.warmup), "--device-id", str(ctx.args.device_id)]
    groups = [providers] if parallel else [[provider] for provider in providers]
    problems = []
    deadline = time.monotonic() + limit
    for group in groups:
        children = [ctx.start(f"{step}-{p}", [*base, "--provider", p], deadline - time.monotonic(), cores)
                    for p, cores in zip(group, core_split(len(group)), strict=True)]
        problems += wait_all(children)
    cells = [line for line in record.read(ctx.out) if line["kind"] == "cell" and line["step"] == step]
    if problems:
        raise StepFailed(f"{len(cells)} cells written; " + "; ".join(problems))
    return f"{len(cells)} cells ({', '.join(providers)}{', side by side' if parallel and len(providers) > 1 else ''})"


# ----- steps -------------------------------------------------------------------------------------

def step_preflight(ctx: Context, limit: float) -> str:
    plan = Plan(ctx.providers, ctx.tensorrt_required, ctx.args.wheels, ctx.target, ctx.work, ctx.args.model,
                ctx.args.turnsense, build_bench=ctx.args.model is None)
    ctx.report = run_preflight(plan)
    print("\n".join(ctx.report.lines()), flush=True)
    record.append(ctx.out, "preflight", **ctx.report.as_json())
    if ctx.report.missing:
        raise Missing(f"{len(ctx.report.missing)} missing (listed above): "
                      + ", ".join(item.split(":")[0] for item in ctx.report.missing))
    trt = "TensorRT: yes" if ctx.report.tensorrt else ctx.report.facts.get("TensorRT", "")
    gpu = ctx.gpu_providers() or "tensorrt" in ctx.providers
    return f"nothing missing in {ctx.report.seconds:.1f} s" + (f" ({trt})" if gpu else "")


def step_install(ctx: Context, limit: float) -> str:
    try:
        return install_offline(ctx.python(), REPO, ctx.args.wheels, ctx.target, ctx.work / "logs" / "install.log")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        raise StepFailed(str(exc)) from None


def step_models(ctx: Context, limit: float) -> str:
    from utils.gpu.models import turnsense_from_wheel

    done = []
    if not (ctx.turnsense / TURNSENSE_FILE).is_file():
        wheel = sorted((ctx.args.wheels or Path("/nonexistent")).glob("models/pipecat_ai-1.14.0-*.whl"))
        if not wheel:
            raise StepFailed("no TurnSense: pass --turnsense DIR or stage the wheel folder")
        try:
            turnsense_from_wheel(wheel[0], ctx.turnsense)
        except (RuntimeError, KeyError, OSError) as exc:
            raise StepFailed(f"TurnSense from {wheel[0].name}: {exc}") from None
        done.append(f"TurnSense from {wheel[0].name}")
    if ctx.args.model is None and not (ctx.model / "model.onnx").is_file():
        staging = ctx.model.with_name(ctx.model.name + ".building")
        shutil.rmtree(staging, ignore_errors=True)
        started = time.monotonic()
        run_once(ctx, "build-sensevoice-bench", [ctx.python(), "-m", "kitt_stt", "models", "build", "sensevoice-bench",
                                                 "--out", str(staging)], limit)
        staging.rename(ctx.model)
        done.append(f"sensevoice-bench built in {time.monotonic() - started:.0f} s")
    size = (ctx.model / "model.onnx").stat().st_size / 1e6
    record.append(ctx.out, "model", path=str(ctx.model), name=ctx.model.name, model_onnx_mb=round(size, 1),
                  turnsense=str(ctx.turnsense))
    return "; ".join([*done, f"latency model {ctx.model} ({size:.0f} MB model.onnx)"])


def arm_seconds(ctx: Context, seats: list[int], lengths: list[float], arms_in_a_row: int = 1) -> float:
    """How long an arm step should take: its rounds in real time, warm-ups, the server start."""
    rounds = len(seats) * sum(ctx.args.rounds * (length + ROUND_OVERHEAD_S) for length in lengths)
    warmups = len(seats) * ctx.args.warmup * (min(lengths) + ROUND_OVERHEAD_S)
    return arms_in_a_row * (SERVER_START_S + PLAN_SLACK * (rounds + warmups))


def step_ab(ctx: Context, limit: float) -> str:
    providers = ["cpu", *[p for p in ctx.gpu_providers() if p == "cuda"]]
    providers = [p for p in providers if p in ctx.providers]
    return arms(ctx, "ab", providers, [ctx.args.seats], ctx.args.lengths, limit, not ctx.args.sequential)


def write_run_config(ctx: Context, provider: str) -> Path:
    path = ctx.work / f"{provider}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = run_config(ctx.model, provider, ctx.trt_cache, ctx.turnsense, ctx.work / "models", 8, ctx.args.device_id)
    path.write_text(json.dumps(config, indent=1))
    return path


def probe(ctx: Context, provider: str, mode: str, limit: float) -> dict[str, Any]:
    """One session in its own process; its placement is recorded even when it is wrong (exit 1)."""
    config = write_run_config(ctx, provider)
    child = ctx.start(f"probe-{provider}-{mode}", [ctx.python(), str(REPO / "utils" / "gpu" / "session_probe.py"),
                                                    "--config", str(config), "--model", str(ctx.model),
                                                    "--provider", provider, "--mode", mode], limit)
    problems = wait_all([child])
    lines = [line for line in child.log.read_text(errors="replace").splitlines() if line.startswith("{")]
    if not lines:
        raise StepFailed(f"session probe ({provider}, {mode}) printed no result: " + "; ".join(problems))
    result: dict[str, Any] = json.loads(lines[-1])
    record.append(ctx.out, "placement", **result)
    if result["problem"] or problems:
        raise StepFailed(f"{provider} ({mode}): {result['problem'] or '; '.join(problems)}")
    return result


def step_placement(ctx: Context, limit: float) -> str:
    result = probe(ctx, "cuda", "plain", limit)
    return f"{result['providers'][0]}; {result['placement']}"


def step_trt_build(ctx: Context, limit: float) -> str:
    deadline = time.monotonic() + limit
    shutil.rmtree(ctx.trt_cache, ignore_errors=True)
    config = write_run_config(ctx, "tensorrt")
    started = time.monotonic()
    run_once(ctx, "trt-build", [ctx.python(), "-m", "kitt_stt", "trt", "build", "--config", str(config)], limit)
    cold = time.monotonic() - started
    record.append(ctx.out, "trt", stage="cold build (kitt-stt trt build)", seconds=round(cold, 1))
    warm = probe(ctx, "tensorrt", "warm", deadline - time.monotonic())
    record.append(ctx.out, "trt", stage="cache-warm load", seconds=warm["create_s"],
                  engines_reused=warm["engines_reused"])
    context = probe(ctx, "tensorrt", "ctx", deadline - time.monotonic())
    record.append(ctx.out, "trt", stage="EP-context load", seconds=context["create_s"])
    ctx.built_trt = True
    reused = "engine reused" if warm["engines_reused"] else "engine NOT reused"
    return (f"cold build {cold:.1f} s; cache-warm {warm['create_s']:.1f} s ({reused}); "
            f"EP-context {context['create_s']:.1f} s")


def step_trt(ctx: Context, limit: float) -> str:
    return arms(ctx, "trt", ["tensorrt"], [ctx.args.seats], ctx.args.lengths, limit, False)


def step_scale(ctx: Context, limit: float) -> str:
    providers = [p for p in ctx.gpu_providers() if p != "tensorrt" or ctx.built_trt]
    return arms(ctx, "scale", providers, ctx.args.scale_seats, ctx.args.scale_lengths, limit, False)


def step_agreement(ctx: Context, limit: float) -> str:
    from utils.gpu.agreement import compare

    deadline = time.monotonic() + limit
    providers = ["cpu", *[p for p in ctx.gpu_providers() if p != "tensorrt" or ctx.built_trt]]
    decoded = {}
    for provider in providers:
        path = ctx.work / f"agreement-{provider}.json"
        run_once(ctx, f"agreement-{provider}", [ctx.python(), "-m", "utils.gpu.agreement", "decode", "--provider",
                                                provider, "--model", str(ctx.model), "--config",
                                                str(write_run_config(ctx, provider)), "--out", str(path)],
                 deadline - time.monotonic())
        decoded[provider] = json.loads(path.read_text())
    verdicts = []
    for provider in providers[1:]:
        result = compare(decoded["cpu"], decoded[provider])
        record.append(ctx.out, "agreement", model=ctx.model.name, **result)
        verdicts.append(f"{provider}: {result['exact']}/{result['clips']} exact, CER {result['cer']:.2%}"
                        + ("" if result["within_tolerance"] else " (OUTSIDE tolerance)"))
    if any("OUTSIDE" in verdict for verdict in verdicts):
        raise StepFailed("; ".join(verdicts))
    return "; ".join(verdicts)


def no_gpu(ctx: Context) -> str:
    return "" if ctx.gpu_providers() else "no GPU provider in this run"


def no_trt(ctx: Context) -> str:
    if "tensorrt" not in ctx.gpu_providers():
        return ctx.report.facts.get("TensorRT", "tensorrt not in --providers") if "tensorrt" in ctx.providers \
            else "tensorrt not in --providers"
    return ""


def trt_not_built(ctx: Context) -> str:
    return no_trt(ctx) or ("" if ctx.built_trt else "trt-build did not pass")


def only_cpu(ctx: Context) -> str:
    return "" if ctx.gpu_providers() else "only the CPU in this run: nothing to compare with"


STEPS = (
    Step("preflight", "what this host lacks, by name", 10, step_preflight, fatal=True),
    Step("install", "the wheel folder into the private target (--no-index)", 120, step_install, fatal=True,
         skip_reason=lambda ctx: "" if ctx.args.wheels else "no --wheels folder"),
    Step("models", "TurnSense and the latency model", 240, step_models, fatal=True),
    Step("ab", "CPU vs CUDA arms, production settings", 330, step_ab,
         planned_s=lambda ctx: arm_seconds(ctx, [ctx.args.seats], ctx.args.lengths,
                                           2 if ctx.args.sequential and ctx.gpu_providers() else 1)),
    Step("placement", "CUDA session providers and profile placement", 45, step_placement, skip_reason=no_gpu),
    Step("trt-build", "TensorRT cold build, cache-warm and EP-context loads", 150, step_trt_build, skip_reason=no_trt),
    Step("agreement", "token sequences of every provider vs the CPU", 120, step_agreement, skip_reason=only_cpu),
    Step("trt", "TensorRT arm, same cells", 330, step_trt, skip_reason=trt_not_built,
         planned_s=lambda ctx: arm_seconds(ctx, [ctx.args.seats], ctx.args.lengths)),
    Step("scale", "GPU arms at more seats", 300, step_scale, skip_reason=lambda ctx: no_gpu(ctx) or (
        "" if ctx.args.scale_seats else "no --scale-seats"),
         planned_s=lambda ctx: arm_seconds(ctx, ctx.args.scale_seats, ctx.args.scale_lengths,
                                           len([p for p in ctx.gpu_providers() if p != "tensorrt" or ctx.built_trt]))),
)


def host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"python": sys.version.split()[0], "machine": platform.machine(),
                             "cpus": len(os.sched_getaffinity(0)), "kernel": platform.release()}
    if shutil.which("nvidia-smi"):
        try:
            facts["gpus"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                            "--format=csv,noheader"], capture_output=True, text=True,
                                           timeout=10).stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            facts["gpus"] = ["nvidia-smi did not answer"]
    return facts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.absolute()
    providers = args.providers.split(",") if args.providers else list(PROVIDERS)
    ctx = Context(args, out, providers, tensorrt_required=bool(args.providers) and "tensorrt" in providers)
    ctx.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    record.append(out, "run", argv=sys.argv[1:] if argv is None else argv, providers=providers,
                  rounds=args.rounds, warmup=args.warmup, seats=args.seats, lengths=args.lengths,
                  budget_s=args.budget_s, parallel=not args.sequential, host=host_facts())

    def on_result(result: StepResult) -> None:
        record.append(out, "step", number=result.number, step=result.step.name, status=result.status,
                      seconds=round(result.seconds, 1), limit_s=round(result.limit_s), detail=result.detail)

    _, status = run_steps(STEPS, ctx, args.budget_s, sys.stdout, on_result)
    table = write_table(out)
    print("\n" + table)
    verdict = "passed" if status == EXIT_OK else "FAILED" if status == 1 else "stopped: missing prerequisites"
    print(f"acceptance: {verdict} in {time.monotonic() - started:.0f} s (exit status {status}); "
          f"{out / record.RESULTS}, {out / 'table.md'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
