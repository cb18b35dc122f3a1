"""Offline install: the wheel folder's wheels into a private target folder, never into the host.

The host's Python and its packages (torch, NVIDIA's CUDA wheels, numpy, the CPU onnxruntime)
stay as they are: pip runs with ``--no-index`` (only the folder), ``--no-deps`` (exactly the
staged wheels, nothing resolved from elsewhere) and ``--target`` (a folder of its own). The run's
children get that folder first on ``PYTHONPATH``, so its ``onnxruntime`` (the GPU build) shadows
the host's CPU one while everything else the host has stays importable. Since pip did not
resolve anything, the result is checked here: every requirement of kitt-stt and of each
installed wheel must be met by the target folder plus the host, or the step names what is not.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

from utils.gpu.requirements import project_requirements, unsatisfied
from utils.gpu.wheels import WheelFile, installed_versions, provided_versions, wheels_in

INSTALL_TIMEOUT_S = 600


def pending_wheels(wheels: Path, target: Path) -> list[WheelFile]:
    """The folder's wheels not yet in the target at their version (a rerun installs nothing)."""
    present = installed_versions([str(target)]) if target.is_dir() else {}
    return [wheel for wheel in wheels_in(wheels) if present.get(wheel.name) != wheel.version]


def install_command(python: str, wheels: Path, target: Path, pending: list[WheelFile]) -> list[str]:
    return [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "--no-deps",
            "--no-compile", "--disable-pip-version-check", "--upgrade", "--target", str(target),
            *(str(wheel.path) for wheel in pending)]


def unmet_requirements(repo: Path, target: Path, host_paths: list[str]) -> list[str]:
    """kitt-stt's requirements and each target wheel's, checked against target + host."""
    versions = provided_versions([str(target), *host_paths])
    problems = [f"kitt-stt needs {item}" for item in unsatisfied(project_requirements(repo), versions)]
    for dist in importlib.metadata.distributions(path=[str(target)]):  # extras' requirements do not apply
        problems += [f"{dist.metadata['Name']} needs {item}" for item in unsatisfied(dist.requires or [], versions)]
    return problems


def install_offline(python: str, repo: Path, wheels: Path, target: Path, log: Path) -> str:
    """Install what is pending; return a one-line result, raise RuntimeError naming what failed."""
    pending = pending_wheels(wheels, target)
    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    if pending:
        target.mkdir(parents=True, exist_ok=True)
        command = install_command(python, wheels, target, pending)
        with log.open("a") as out:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
        if result.returncode != 0:
            tail = "\n".join(log.read_text().strip().splitlines()[-8:])
            raise RuntimeError(f"pip install --no-index exited {result.returncode} (log {log}):\n{tail}")
    unmet = unmet_requirements(repo, target, [entry for entry in sys.path if entry])
    if unmet:
        raise RuntimeError(f"after installing {wheels} into {target}, still unmet: " + "; ".join(unmet))
    names = ", ".join(f"{wheel.name} {wheel.version}" for wheel in pending) or "nothing new"
    return f"{len(pending)} wheels into {target} in {time.monotonic() - started:.1f} s ({names})"
