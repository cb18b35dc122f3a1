"""The pip commands that turn this environment into a GPU one, honouring the repository's pins.

The same sequence as the GPU image (Dockerfile, target ``gpu``): kitt-stt with its ``gpu`` extra
under ``deployment/pins/gpu-<machine>.txt``; then the CPU ``onnxruntime`` wheel, which kitt-stt's
base requirements pull in, is removed and onnxruntime-gpu reinstalled over the module both share;
then TensorRT's libraries from NVIDIA's index (PyPI holds only a stub of that name), without
dependencies, at the pinned version. pytest and httpx are the latency run's harness.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

NVIDIA_INDEX = "https://pypi.nvidia.com"


def pins_file(repo: Path, machine: str | None = None) -> Path | None:
    path = repo / "deployment" / "pins" / f"gpu-{machine or platform.machine()}.txt"
    return path if path.is_file() else None


def pinned(pins: Path, name: str) -> str | None:
    """The ``==`` version a constraints file pins ``name`` to."""
    for line in pins.read_text().splitlines():
        match = re.match(rf"^\s*{re.escape(name)}\s*==\s*([^\s;#]+)", line, re.IGNORECASE)
        if match:
            return match.group(1)
    return None


def install_commands(python: str, repo: Path, pins: Path | None) -> list[list[str]]:
    """kitt-stt with the GPU extra (and what the run needs), then the CPU onnxruntime removed."""
    pip = [python, "-m", "pip"]
    constrain = ["-c", str(pins)] if pins else []
    extras = ["cuda-toolkit[cudart]"] if tensorrt_package(pins) else []
    return [
        [*pip, "install", *constrain, "-e", f"{repo}[gpu]", "onnxruntime-gpu[cuda,cudnn]", *extras, "pytest", "httpx"],
        [*pip, "uninstall", "-y", "onnxruntime"],
    ]


def finish_commands(python: str, pins: Path | None, onnxruntime_gpu: str) -> list[list[str]]:
    """onnxruntime-gpu reinstalled at the version just installed (uninstalling the CPU wheel removed
    files of the module both share), then TensorRT's libraries where the pins name them."""
    pip = [python, "-m", "pip"]
    commands = [[*pip, "install", "--force-reinstall", "--no-deps", f"onnxruntime-gpu=={onnxruntime_gpu}"]]
    trt = tensorrt_package(pins)
    if pins and trt:
        commands.append([*pip, "install", "--no-deps", "--only-binary=:all:", "--index-url", NVIDIA_INDEX,
                         "-c", str(pins), trt])
    return commands


def tensorrt_package(pins: Path | None) -> str | None:
    return next((name for name in ("tensorrt-cu12-libs", "tensorrt-cu13-libs") if pins and pinned(pins, name)), None)
