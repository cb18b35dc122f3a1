"""What a wheel file or an installed distribution is, read from the files themselves.

Which CUDA major an onnxruntime-gpu release links cannot be told from its version number (PyPI
switched from CUDA 12 to CUDA 13 builds between two minor releases), so it is read where the build
records it: ``onnxruntime/capi/build_and_package_info.py`` (``cuda_version = '13.0'``), inside the
wheel (a zip: only its directory and that one member are read, so a 300 MB wheel costs
milliseconds) or in the installed package. Standard library only: the preflight and the staging
tool run this before anything is installed.
"""

from __future__ import annotations

import importlib.metadata
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

BUILD_INFO = "onnxruntime/capi/build_and_package_info.py"
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-"
                         r"(?P<platform>[^-]+)\.whl$")


def canonical(name: str) -> str:
    """PEP 503 name: ``Onnxruntime_GPU`` and ``onnxruntime-gpu`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class WheelFile:
    path: Path
    name: str  # canonical
    version: str
    python_tag: str
    platform_tag: str


def parse_wheel_name(path: Path) -> WheelFile | None:
    match = _WHEEL_NAME.match(path.name)
    if match is None:
        return None
    return WheelFile(path, canonical(match["name"]), match["version"], match["python"], match["platform"])


def wheels_in(folder: Path) -> list[WheelFile]:
    return [wheel for path in sorted(folder.glob("*.whl")) if (wheel := parse_wheel_name(path))]


def cuda_version_from_build_info(text: str) -> str | None:
    """``cuda_version = '12.8'`` in onnxruntime's build_and_package_info.py; None for CPU builds."""
    match = re.search(r"^cuda_version\s*=\s*['\"]([0-9][0-9.]*)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def wheel_cuda_version(path: Path) -> str | None:
    """The CUDA version an onnxruntime wheel was built for, read from inside the wheel."""
    with zipfile.ZipFile(path) as wheel:
        try:
            text = wheel.read(BUILD_INFO).decode()
        except KeyError:
            return None
    return cuda_version_from_build_info(text)


def installed_versions(paths: list[str]) -> dict[str, str]:
    """Canonical name -> version of every distribution on ``paths`` (the first one found wins, as
    for imports)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def provided_versions(paths: list[str]) -> dict[str, str]:
    """``installed_versions``, with onnxruntime-gpu also answering for ``onnxruntime``: both
    provide the one ``onnxruntime`` module, so either meets kitt-stt's ``onnxruntime`` requirement."""
    versions = installed_versions(paths)
    if "onnxruntime-gpu" in versions:
        versions.setdefault("onnxruntime", versions["onnxruntime-gpu"])
    return versions


def installed_cuda_version(paths: list[str]) -> tuple[str | None, str | None, Path | None]:
    """(distribution, CUDA version, folder) of the ``onnxruntime`` module the first of ``paths``
    holding one would import; (None, None, None) when none does."""
    for entry in paths:
        package = Path(entry) / "onnxruntime"
        if not (package / "__init__.py").is_file():
            continue
        info = package / "capi" / "build_and_package_info.py"
        text = info.read_text() if info.is_file() else ""
        name = re.search(r"^package_name\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        return (name.group(1) if name else "onnxruntime"), cuda_version_from_build_info(text), package
    return None, None, None
