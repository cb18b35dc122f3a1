"""Find the NVIDIA libraries a GPU provider will load, by file, without loading them.

The preflight must answer in seconds on a host where nothing may be installed yet, so the
libraries are looked up as files where the dynamic loader and onnxruntime would find them:
``LD_LIBRARY_PATH``, the ldconfig cache, the usual system folders, and NVIDIA's pip wheels
(``nvidia/*/lib``, ``nvidia/cu13/lib``, ``tensorrt_libs``) in site-packages and in the run's
private target folder. The folders found in wheels go onto the children's ``LD_LIBRARY_PATH``
(the loader reads it at process start, so it serves the children, not this process).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/cuda/lib64",
               "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/aarch64-linux-gnu",
               "/usr/local/cuda/targets/aarch64-linux/lib")


@dataclass(frozen=True)
class LibraryNeed:
    soname: str
    label: str


def cuda_libraries(major: int) -> list[LibraryNeed]:
    """What onnxruntime's CUDA provider links for a CUDA ``major`` build (cuDNN 9 in both)."""
    cufft = {12: "libcufft.so.11", 13: "libcufft.so.12"}.get(major, f"libcufft.so.{major - 1}")
    return [LibraryNeed(f"libcudart.so.{major}", f"CUDA {major} runtime"),
            LibraryNeed(f"libcublas.so.{major}", f"cuBLAS (CUDA {major})"),
            LibraryNeed(f"libcublasLt.so.{major}", f"cuBLASLt (CUDA {major})"),
            LibraryNeed("libcudnn.so.9", f"cuDNN 9 (for CUDA {major})"),
            LibraryNeed(cufft, f"cuFFT (CUDA {major})"),
            LibraryNeed("libcurand.so.10", "cuRAND")]


TENSORRT_LIBRARIES = [LibraryNeed("libnvinfer.so.10", "TensorRT 10"),
                      LibraryNeed("libnvonnxparser.so.10", "TensorRT 10 ONNX parser")]


def wheel_library_dirs(site_dirs: list[str]) -> list[Path]:
    """NVIDIA's wheels' library folders under each site-packages (or private target) folder."""
    found: list[Path] = []
    for root in dict.fromkeys(site_dirs):
        base = Path(root)
        for pattern in ("nvidia/*/lib", "nvidia/*/lib64", "nvidia/cu*/lib", "tensorrt_libs", "tensorrt_lib"):
            found += sorted(path for path in base.glob(pattern) if path.is_dir())
    return list(dict.fromkeys(found))


def ldconfig_cache() -> dict[str, str]:
    """soname -> path from ``ldconfig -p`` (empty where ldconfig is absent)."""
    for command in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            text = subprocess.run([command, "-p"], capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        cache = {}
        for line in text.splitlines():
            name, _, path = line.strip().partition(" => ")
            if path:
                cache.setdefault(name.split(" ")[0], path.strip())
        return cache
    return {}


@dataclass
class LibraryFinder:
    wheel_dirs: list[Path]
    cache: dict[str, str]

    @classmethod
    def for_paths(cls, site_dirs: list[str]) -> LibraryFinder:
        return cls(wheel_library_dirs(site_dirs), ldconfig_cache())

    def search_dirs(self) -> list[Path]:
        env = [Path(entry) for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":") if entry]
        return list(dict.fromkeys([*env, *self.wheel_dirs, *(Path(d) for d in SYSTEM_DIRS)]))

    def find(self, soname: str) -> Path | None:
        for folder in self.search_dirs():
            if (folder / soname).exists():
                return folder / soname
        cached = self.cache.get(soname)
        return Path(cached) if cached else None


def driver_cuda_version() -> tuple[str | None, int, str]:
    """(newest CUDA the driver supports, GPU count, problem) from libcuda.so.1 through ctypes."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return None, 0, f"libcuda.so.1 (the NVIDIA driver) cannot be loaded: {exc}"
    if cuda.cuInit(0) != 0:
        return None, 0, "libcuda.so.1 loads but cuInit fails (no device, or driver/kernel module mismatch)"
    version, count = ctypes.c_int(), ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    cuda.cuDeviceGetCount(ctypes.byref(count))
    text = f"{version.value // 1000}.{(version.value % 1000) // 10}"
    return text, count.value, "" if count.value else "the driver sees no GPU"
