"""Preflight: in a few seconds, before anything long starts, everything the run needs that this
host lacks, each named exactly (the file, the package and version, the folder).

    python -m utils.gpu.preflight --providers cpu,cuda --wheels WHEELS --target SITE --work WORK

Checks: the Python packages the project needs (installed on the host, in the private target
folder, or in the wheel folder about to be installed), the wheel folder's Python tags; for
``cuda``/``tensorrt``: the NVIDIA driver (libcuda.so.1, its CUDA version, a GPU), the
onnxruntime-gpu build and the CUDA major it was built for (read from the wheel or the installed
package), each CUDA/cuDNN library that build links, by file; for ``tensorrt``: its libraries and
onnxruntime's TensorRT provider; the models (the benchmark model or ``--model``, TurnSense for the
production settings) and free disk. Nothing is loaded but libcuda (to ask the driver), so it
cannot hang on a half-installed stack. Exit status 0 when nothing is missing, 2 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from utils.gpu.libraries import TENSORRT_LIBRARIES, LibraryFinder, cuda_libraries, driver_cuda_version  # noqa: E402
from utils.gpu.requirements import project_requirements, unsatisfied  # noqa: E402
from utils.gpu.wheels import installed_cuda_version, provided_versions, wheel_cuda_version, wheels_in  # noqa: E402

EXIT_MISSING = 2
GIB = 1 << 30
TURNSENSE_FILE = "smart-turn-v3.2-cpu.onnx"
TURNSENSE_WHEEL = "pipecat_ai-1.14.0-*.whl"


def user_model_cache() -> Path:
    """Where ``kitt-stt models pull`` installs by default (platformdirs' user cache), or the
    ``models.cache_dir`` an environment override names."""
    override = os.environ.get("KITT_STT__MODELS__CACHE_DIR")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kitt-stt" / "models"


def find_model(name: str, work: Path, marker: str) -> Path | None:
    """An installed or built ``name`` (holding ``marker``): the run's own, else the user's cache."""
    for folder in (work / "models" / name, user_model_cache() / name):
        if (folder / marker).is_file():
            return folder
    return None


@dataclass
class Plan:
    """What the run will need: which providers, from where, into where."""

    providers: list[str]
    tensorrt_required: bool  # named on the command line (else: measured where its libraries exist)
    wheels: Path | None
    target: Path
    work: Path
    model: Path | None
    turnsense: Path | None
    build_bench: bool = True  # the latency model is sensevoice-bench, built here (needs torch)
    cuda_major: int = 13  # whose libraries to name when neither a build nor a driver says

    def site_dirs(self) -> list[str]:
        return [str(self.target), *sys.path]

    def gpu(self) -> bool:
        return any(provider != "cpu" for provider in self.providers)


@dataclass
class Report:
    checks: list[tuple[bool, str, str]] = field(default_factory=list)  # (ok, what, detail)
    facts: dict[str, str] = field(default_factory=dict)
    library_dirs: list[str] = field(default_factory=list)  # for the children's LD_LIBRARY_PATH
    tensorrt: bool = False  # the TensorRT arm can run
    seconds: float = 0.0

    def add(self, ok: bool, what: str, detail: str) -> None:
        self.checks.append((ok, what, detail))

    @property
    def missing(self) -> list[str]:
        return [f"{what}: {detail}" for ok, what, detail in self.checks if not ok]

    def lines(self) -> list[str]:
        out = [f"  {'ok     ' if ok else 'MISSING'} {what}: {detail}" for ok, what, detail in self.checks]
        verdict = "OK" if not self.missing else f"MISSING {len(self.missing)}: " + "; ".join(self.missing)
        return [*out, f"preflight ({self.seconds:.1f} s): {verdict}"]

    def as_json(self) -> dict[str, object]:
        return {"ok": not self.missing, "missing": self.missing, "facts": self.facts, "tensorrt": self.tensorrt,
                "library_dirs": self.library_dirs, "seconds": round(self.seconds, 2),
                "checks": [{"ok": ok, "what": what, "detail": detail} for ok, what, detail in self.checks]}


def python_tag_fits(tag: str, abi: str, major: int, minor: int) -> bool:
    for part in tag.split("."):
        if part in ("py3", f"py{major}{minor}") or part == f"cp{major}{minor}":
            return True
        if abi == "abi3" and part.startswith("cp3") and int(part[3:] or 0) <= minor:
            return True
    return False


def check_packages(plan: Plan, report: Report) -> None:
    versions = provided_versions(plan.site_dirs())
    staged = {wheel.name: wheel.version for wheel in wheels_in(plan.wheels)} if plan.wheels else {}
    major, minor = sys.version_info[:2]
    if plan.wheels:
        split = sorted(path.name for path in plan.wheels.rglob("*.parts.json"))
        if split:
            report.add(False, f"wheel folder {plan.wheels}", f"{len(split)} files still in pieces ({split[0]}, ...): "
                       f"run `python -m utils.gpu.stage join {plan.wheels}`")
        foreign = [wheel.path.name for wheel in wheels_in(plan.wheels)
                   if not python_tag_fits(wheel.python_tag, wheel.path.name.split("-")[-2], major, minor)]
        report.add(not foreign, f"wheel folder {plan.wheels}",
                   f"{len(staged)} wheels for this Python {major}.{minor}" if not foreign else
                   f"wheels for another Python than {major}.{minor}: {', '.join(foreign)} (stage with --python "
                   f"{major}.{minor})")
    if "onnxruntime-gpu" in staged:
        staged.setdefault("onnxruntime", staged["onnxruntime-gpu"])
    missing = unsatisfied(project_requirements(REPO), {**versions, **staged})
    report.add(not missing, "Python packages for kitt-stt",
               "all installed or in the wheel folder" if not missing else
               ", ".join(missing) + (f" (not in {plan.wheels} either)" if plan.wheels else " (no --wheels folder)"))


def onnxruntime_gpu(plan: Plan, report: Report) -> int | None:
    """The CUDA major of the onnxruntime build the GPU arms will use; None when there is none."""
    package, cuda, folder = installed_cuda_version(plan.site_dirs())
    staged = [w for w in wheels_in(plan.wheels) if w.name == "onnxruntime-gpu"] if plan.wheels else []
    if staged:
        try:
            cuda = wheel_cuda_version(staged[-1].path)
        except (zipfile.BadZipFile, OSError) as exc:
            report.add(False, "onnxruntime-gpu", f"{staged[-1].path.name} is not a readable wheel ({exc}): "
                                                 "run `stage join` on the folder")
            return None
        where = f"{staged[-1].path.name} in {plan.wheels}"
        has_trt = "onnxruntime/capi/libonnxruntime_providers_tensorrt.so" in zipfile.ZipFile(staged[-1].path).namelist()
    elif package and cuda:
        where = f"{package} in {folder}"
        has_trt = folder is not None and (folder / "capi" / "libonnxruntime_providers_tensorrt.so").is_file()
    else:
        report.add(False, "onnxruntime-gpu", f"not installed ({package or 'no onnxruntime'} "
                   f"{'in ' + str(folder) + ' ' if folder else ''}is a CPU build) and "
                   + (f"no onnxruntime_gpu wheel in {plan.wheels}" if plan.wheels else "no --wheels folder"))
        return None
    if cuda is None:
        report.add(False, "onnxruntime-gpu", f"{where}: its build_and_package_info.py names no CUDA version")
        return None
    report.add(True, "onnxruntime-gpu", f"{where}, built for CUDA {cuda}")
    report.facts["onnxruntime-gpu"] = f"{where}, CUDA {cuda}"
    report.facts["onnxruntime TensorRT provider"] = "yes" if has_trt else "no"
    return int(cuda.split(".")[0])


def check_gpu(plan: Plan, report: Report) -> None:
    driver, count, problem = driver_cuda_version()
    report.add(not problem, "NVIDIA driver", problem or f"CUDA {driver}, {count} GPU(s)")
    if driver:
        report.facts["driver CUDA"] = driver
    major = onnxruntime_gpu(plan, report)
    assumed = ""
    if major is None:  # still name the libraries: those of the driver's CUDA major (or the design target's)
        major = int(driver.split(".")[0]) if driver else plan.cuda_major
        assumed = f" (no onnxruntime-gpu build to read: checked for CUDA {major})"
    elif driver and int(driver.split(".")[0]) < major:
        report.add(False, "driver vs build", f"onnxruntime-gpu needs a CUDA {major} driver; this driver supports "
                                             f"CUDA {driver} (stage with --cuda {driver.split('.')[0]})")
    finder = LibraryFinder.for_paths(plan.site_dirs())
    report.library_dirs = [str(folder) for folder in finder.wheel_dirs]
    for need in cuda_libraries(major):
        path = finder.find(need.soname)
        report.add(path is not None, need.label, str(path) if path else
                   f"{need.soname} not found (LD_LIBRARY_PATH, ldconfig, /usr/local/cuda, site-packages/nvidia/*/lib)"
                   + assumed)
    trt_paths = {need.soname: finder.find(need.soname) for need in TENSORRT_LIBRARIES}
    trt_ok = all(trt_paths.values()) and report.facts.get("onnxruntime TensorRT provider") == "yes"
    report.tensorrt = trt_ok
    if plan.tensorrt_required or trt_ok:
        for need in TENSORRT_LIBRARIES:
            path = trt_paths[need.soname]
            report.add(path is not None, need.label, str(path) if path else f"{need.soname} not found")
    else:
        absent = [name for name, path in trt_paths.items() if path is None] or ["onnxruntime's TensorRT provider"]
        report.facts["TensorRT"] = f"not measured: {', '.join(absent)} not found"


def check_models(plan: Plan, report: Report) -> None:
    if plan.model is not None:
        files = [name for name in ("model.onnx", "tokens.txt") if not (plan.model / name).is_file()]
        report.add(not files, "model", f"{plan.model}" if not files else f"{plan.model} lacks {', '.join(files)}")
    elif plan.build_bench:
        built = find_model("sensevoice-bench", plan.work, "model.onnx") is not None
        torch = importlib.util.find_spec("torch") is not None
        report.add(built or torch, "model sensevoice-bench",
                   "built" if built else "torch importable: will build it (~1 min, ~5 GB memory)" if torch else
                   "torch is not importable, so sensevoice-bench cannot be built: install torch (a CPU build is "
                   "enough) or pass --model DIR")
    turn = plan.turnsense or find_model("turnsense", plan.work, TURNSENSE_FILE)
    wheel = sorted(plan.wheels.glob(f"models/{TURNSENSE_WHEEL}")) if plan.wheels else []
    if turn is not None:
        report.add((turn / TURNSENSE_FILE).is_file(), "TurnSense", str(turn) if (turn / TURNSENSE_FILE).is_file()
                   else f"{turn} has no {TURNSENSE_FILE}")
    else:
        report.add(bool(wheel), "TurnSense", f"from {wheel[0]}" if wheel else
                   f"no --turnsense DIR and no models/{TURNSENSE_WHEEL} in the wheel folder (stage download puts it "
                   "there)")


def check_disk(plan: Plan, report: Report) -> None:
    need_gib = (3 if plan.model is None and plan.build_bench else 1) + (2 if plan.gpu() else 0)
    folder = plan.work
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free / GIB
    report.add(free >= need_gib, "free disk", f"{free:.1f} GiB free in {folder} (need {need_gib} GiB)")


def run_preflight(plan: Plan) -> Report:
    started = time.monotonic()
    report = Report()
    report.add(sys.version_info >= (3, 10), "Python", f"{sys.version.split()[0]} ({sys.executable})")
    check_packages(plan, report)
    if plan.gpu():
        check_gpu(plan, report)
    check_models(plan, report)
    check_disk(plan, report)
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="cpu,cuda,tensorrt")
    parser.add_argument("--wheels", type=Path)
    parser.add_argument("--target", type=Path, default=REPO / ".cache" / "gpu-acceptance" / "site")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "gpu-acceptance")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--turnsense", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    providers = args.providers.split(",")
    report = run_preflight(Plan(providers, "tensorrt" in providers, args.wheels, args.target, args.work, args.model,
                                args.turnsense))
    print(json.dumps(report.as_json(), indent=2) if args.json else "\n".join(report.lines()))
    return 0 if not report.missing else EXIT_MISSING


if __name__ == "__main__":
    sys.exit(main())
