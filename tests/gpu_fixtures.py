"""Fixtures for the GPU acceptance kit's tests, built offline from what this machine has.

``fake_ort_wheel`` writes a small zip shaped like an onnxruntime wheel (the one member the CUDA
detection reads, a dist-info): the real ones are 200-300 MB. ``repack`` turns an installed
distribution back into a wheel from its RECORD, so a wheel folder for the offline-install test
needs no index; ``filtered_host`` makes a Python whose packages are this one's minus some, i.e.
a host that lacks exactly those.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(path: Path, name: str, version: str, members: dict[str, bytes], requires: tuple[str, ...] = (),
                tag: str = "py3-none-any") -> Path:
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {item}\n" for item in requires)
    files = {**members, f"{dist_info}/METADATA": metadata.encode(),
             f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"
             .encode()}
    record = [_record_line(member, data) for member, data in files.items()] + [f"{dist_info}/RECORD,,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def fake_ort_wheel(folder: Path, version: str, cuda: str | None, tensorrt: bool = False) -> Path:
    """An onnxruntime-gpu-shaped wheel whose build info says ``cuda_version = cuda``."""
    info = f"package_name = 'onnxruntime-gpu'\n__version__ = '{version}'\n"
    info += f"cuda_version = '{cuda}'\ncudnn_version = '9'\n" if cuda else ""
    members = {"onnxruntime/__init__.py": b"", "onnxruntime/capi/build_and_package_info.py": info.encode()}
    if tensorrt:
        members["onnxruntime/capi/libonnxruntime_providers_tensorrt.so"] = b"\x7fELF"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}{sys.version_info.minor}-" \
          "manylinux_2_28_x86_64"
    return write_wheel(folder / f"onnxruntime_gpu-{version}-{tag}.whl", "onnxruntime-gpu", version, members,
                       ("numpy>=1.21",), tag)


def repack(distribution: str, folder: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists."""
    dist = importlib.metadata.distribution(distribution)
    root = Path(str(dist.locate_file("")))
    members = {}
    for entry in dist.files or []:
        path = root / entry
        text = str(entry)
        if "__pycache__" in text or text.endswith((".pyc", "RECORD", "INSTALLER", "REQUESTED", "direct_url.json")) \
                or text.startswith("..") or not path.is_file():
            continue
        members[text] = path.read_bytes()
    pure = all(not name.endswith(".so") for name in members)
    abi = f"cp{sys.version_info.major}{sys.version_info.minor}"
    tag = "py3-none-any" if pure else f"{abi}-{abi}-linux_x86_64"
    dist_info = next(member.split("/")[0] for member in members if member.split("/")[0].endswith(".dist-info"))
    files = {member: data for member, data in members.items() if member != f"{dist_info}/WHEEL"}
    files[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {str(pure).lower()}\n" \
                                  f"Tag: {tag}\n".encode()
    path = folder / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    record = [_record_line(member, data) for member, data in files.items()] + [f"{dist_info}/RECORD,,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def filtered_host(root: Path, without: set[str]) -> tuple[Path, Path]:
    """A venv whose only packages are this interpreter's site-packages minus ``without`` (top-level
    names and their dist-info folders), linked, not copied. Returns (python, the linked folder)."""
    site = Path(sysconfig.get_paths()["purelib"])
    hidden = set()
    for name in without:
        dist = importlib.metadata.distribution(name)
        hidden |= {str(entry).split("/")[0] for entry in dist.files or [] if not str(entry).startswith("..")}
    linked = root / "host-site"
    linked.mkdir(parents=True)
    for entry in site.iterdir():
        if entry.name not in hidden and not entry.name.endswith(".pth"):
            (linked / entry.name).symlink_to(entry)
    venv = root / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    own_site = next((venv / "lib").glob("python*/site-packages"))
    (own_site / "host-site.pth").write_text(str(linked) + "\n")
    return venv / "bin" / "python", linked
