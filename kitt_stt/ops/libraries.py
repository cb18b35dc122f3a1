"""The onnxruntime build and the CUDA, cuDNN and TensorRT libraries the service would load.

Each library is looked up the way onnxruntime's providers will be at run time: by soname through
the dynamic loader (``LD_LIBRARY_PATH``, the ldconfig cache), so what is reported here is what
``kitt-stt serve`` gets. ``onnxruntime.preload_dlls()`` is deliberately not called: the service
does not call it, so a library only it could find would be reported as present yet fail in the
service. When the loader cannot find a library, NVIDIA's pip wheels in site-packages are searched,
so the report can say which directory is missing from ``LD_LIBRARY_PATH``. Where the GPU build of
onnxruntime is installed, ``ldd`` on its provider libraries is the final word on whether
everything they link resolves (the same check as the image build).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import shutil
import site
import subprocess
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino")
PROVIDER_LIBRARIES = {"CUDAExecutionProvider": "libonnxruntime_providers_cuda.so",
                      "TensorrtExecutionProvider": "libonnxruntime_providers_tensorrt.so"}
LDD_TIMEOUT_S = 30
#: Libraries of the NVIDIA driver, which the container runtime mounts only into running containers
#: (libcuda everywhere; on Jetson also what TensorRT links: libnvdla_compiler, libnvrm_*, ...).
DRIVER_LIBRARY_PREFIXES = ("libcuda.so", "libnvidia-", "libnvdla", "libnvrm", "libnvos", "libnvsci", "libnvsocsys",
                           "libnvtegra", "libnvcucompat")


@dataclass(frozen=True)
class OrtInfo:
    package: str  # the distribution that owns the ``onnxruntime`` module
    version: str
    providers: tuple[str, ...]
    built_with_cuda: str | None
    provider_libraries: dict[str, Path]  # provider -> its shared library, where the build has one
    installed: tuple[str, ...]  # every onnxruntime distribution installed (two of them conflict)


def onnxruntime_info() -> OrtInfo:
    installed = []
    for name in ORT_DISTRIBUTIONS:
        try:
            installed.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        from onnxruntime.capi import build_and_package_info as build
        package, cuda = str(getattr(build, "package_name", "onnxruntime")), getattr(build, "cuda_version", None)
    except ImportError:
        package, cuda = "onnxruntime", None
    capi = Path(ort.__file__).parent / "capi"
    libraries = {provider: capi / name for provider, name in PROVIDER_LIBRARIES.items() if (capi / name).is_file()}
    return OrtInfo(package, ort.__version__, tuple(ort.get_available_providers()), str(cuda) if cuda else None,
                   libraries, tuple(installed))


# ----- versions ----------------------------------------------------------------------------------

def decode_cuda_version(value: int) -> str:
    """CUDA runtime and driver: 1000 * major + 10 * minor (12090 is 12.9)."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def decode_nvidia_version(value: int) -> str:
    """cuDNN, TensorRT, cuFFT, cuRAND: 1000 * major + 100 * minor + patch up to cuDNN 8 / TensorRT 8,
    10000 * major + 100 * minor + patch from cuDNN 9 / TensorRT 10 (101401 is 10.14.1)."""
    if value >= 90000:
        return f"{value // 10000}.{(value % 10000) // 100}.{value % 100}"
    return f"{value // 1000}.{(value % 1000) // 100}.{value % 100}"


def _returned(symbol: str, decode: Callable[[int], str]) -> Callable[[ctypes.CDLL], str]:
    def read(lib: ctypes.CDLL) -> str:
        function = getattr(lib, symbol)
        function.restype = ctypes.c_size_t
        return decode(int(function()))
    return read


def _out_int(symbol: str, decode: Callable[[int], str]) -> Callable[[ctypes.CDLL], str]:
    def read(lib: ctypes.CDLL) -> str:
        value = ctypes.c_int()
        if getattr(lib, symbol)(ctypes.byref(value)) != 0:
            raise OSError(f"{symbol} failed")
        return decode(value.value)
    return read


def _cublas_version(lib: ctypes.CDLL) -> str:
    parts = []
    for kind in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if lib.cublasGetProperty(kind, ctypes.byref(value)) != 0:
            raise OSError("cublasGetProperty failed")
        parts.append(str(value.value))
    return ".".join(parts)


# ----- libraries ---------------------------------------------------------------------------------

#: The CUDA major the supported GPU builds link (pyproject's ``gpu`` extra stops before onnxruntime-gpu
#: 1.27, PyPI's first CUDA 13 build; JetPack 6 is CUDA 12); used when onnxruntime does not say.
DEFAULT_CUDA_MAJOR = 12


@dataclass(frozen=True)
class LibrarySpec:
    name: str  # "libcudart": how the report and the missing list name it
    label: str
    sonames: dict[int, str]  # CUDA major -> the soname onnxruntime's providers link for it
    needed_by: frozenset[str]  # "cuda" and/or "tensorrt"
    version: Callable[[ctypes.CDLL], str] | None = None
    symbol: str = ""  # an exported function, to find the file the loader picked (dladdr)

    def soname(self, cuda_major: int) -> str:
        return self.sonames.get(cuda_major, self.sonames[DEFAULT_CUDA_MAJOR])


_TRT_ONLY, _BOTH = frozenset({"tensorrt"}), frozenset({"cuda", "tensorrt"})
LIBRARIES = (
    LibrarySpec("libcudart", "CUDA runtime", {12: "libcudart.so.12", 13: "libcudart.so.13"}, _BOTH,
                _out_int("cudaRuntimeGetVersion", decode_cuda_version), "cudaRuntimeGetVersion"),
    LibrarySpec("libcublas", "cuBLAS", {12: "libcublas.so.12", 13: "libcublas.so.13"}, _BOTH, _cublas_version,
                "cublasGetProperty"),
    LibrarySpec("libcublasLt", "cuBLASLt", {12: "libcublasLt.so.12", 13: "libcublasLt.so.13"}, _BOTH,
                _returned("cublasLtGetVersion", decode_nvidia_version), "cublasLtGetVersion"),
    LibrarySpec("libcudnn", "cuDNN", {12: "libcudnn.so.9", 13: "libcudnn.so.9"}, _BOTH,
                _returned("cudnnGetVersion", decode_nvidia_version), "cudnnGetVersion"),
    LibrarySpec("libcufft", "cuFFT", {12: "libcufft.so.11", 13: "libcufft.so.12"}, _BOTH,
                _out_int("cufftGetVersion", decode_nvidia_version), "cufftGetVersion"),
    LibrarySpec("libcurand", "cuRAND", {12: "libcurand.so.10", 13: "libcurand.so.10"}, _BOTH,
                _out_int("curandGetVersion", decode_nvidia_version), "curandGetVersion"),
    LibrarySpec("libnvinfer", "TensorRT", {12: "libnvinfer.so.10", 13: "libnvinfer.so.10"}, _TRT_ONLY,
                _returned("getInferLibVersion", decode_nvidia_version), "getInferLibVersion"),
    LibrarySpec("libnvonnxparser", "TensorRT ONNX parser", {12: "libnvonnxparser.so.10", 13: "libnvonnxparser.so.10"},
                _TRT_ONLY, _returned("getNvOnnxParserVersion", decode_nvidia_version), "getNvOnnxParserVersion"),
)


def cuda_major(info: OrtInfo) -> int:
    """The CUDA major onnxruntime's providers link: its own build info, else the supported default."""
    match = re.match(r"(\d+)", info.built_with_cuda or "")
    return int(match.group(1)) if match else DEFAULT_CUDA_MAJOR


@dataclass(frozen=True)
class LibraryStatus:
    spec: LibrarySpec
    loadable: bool  # the dynamic loader finds it, as it will for onnxruntime
    soname: str = ""
    path: str = ""
    version: str = ""
    note: str = ""  # where it is when the loader cannot find it, why it failed to load, other majors

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lacks_only_driver(self) -> str:
        """The driver library it failed on, when that is the only reason it did not load."""
        missing = re.match(r"^(\S+?): cannot open shared object file", self.note)
        return missing.group(1) if missing and driver_library(missing.group(1)) else ""


def driver_library(soname: str) -> bool:
    return soname.startswith(DRIVER_LIBRARY_PREFIXES)


def probe_library(spec: LibrarySpec, major: int = DEFAULT_CUDA_MAJOR,
                  search: Iterable[Path] | None = None) -> LibraryStatus:
    soname = spec.soname(major)
    loaded = _load(soname)
    if isinstance(loaded, ctypes.CDLL):
        return LibraryStatus(spec, True, soname, _loaded_path(loaded, spec.symbol) or soname, _version(spec, loaded))
    if loaded:  # there, but one of its own dependencies is not
        return LibraryStatus(spec, False, soname, note=loaded)
    found = find_in_site_packages(soname, search)
    if found:
        return LibraryStatus(spec, False, soname, str(found[0]),
                             note=f"in site-packages but not on the loader path: add {found[0].parent} to "
                                  "LD_LIBRARY_PATH (as the GPU images do)")
    others = [name for name in dict.fromkeys(spec.sonames.values()) if name != soname and _load(name)]
    note = "not found" + (f" ({', '.join(others)} is there: another CUDA major)" if others else "")
    return LibraryStatus(spec, False, soname, note=note)


def probe_libraries(major: int = DEFAULT_CUDA_MAJOR) -> list[LibraryStatus]:
    search = site_packages()
    return [probe_library(spec, major, search) for spec in LIBRARIES]


def tensorrt_version(major: int = DEFAULT_CUDA_MAJOR) -> str | None:
    """The version of the TensorRT library the loader finds (what onnxruntime will run)."""
    spec = next(spec for spec in LIBRARIES if spec.name == "libnvinfer")
    return probe_library(spec, major, []).version or None


def _load(soname: str) -> ctypes.CDLL | str:
    """The loaded library; "" when the loader finds no such file; the error when it is broken."""
    try:
        return ctypes.CDLL(soname)
    except OSError as exc:
        return "" if str(exc).startswith(f"{soname}: cannot open shared object file") else str(exc)


def _version(spec: LibrarySpec, lib: ctypes.CDLL) -> str:
    if spec.version is None:
        return ""
    try:
        return spec.version(lib)
    except (OSError, AttributeError):
        return ""


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_path(lib: ctypes.CDLL, symbol: str) -> str | None:
    """The file the loader actually mapped for ``lib`` (dladdr on one of its functions)."""
    if not symbol:
        return None
    for holder in (None, "libdl.so.2"):  # dladdr is in libc from glibc 2.34, in libdl before
        try:
            dladdr = ctypes.CDLL(holder).dladdr
            address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
        except (OSError, AttributeError):
            continue
        info = _DlInfo()
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    return None


def site_packages() -> list[Path]:
    paths = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return [Path(path) for path in dict.fromkeys(paths) if Path(path).is_dir()]


def find_in_site_packages(soname: str, search: Iterable[Path] | None = None) -> list[Path]:
    """``soname`` in NVIDIA's wheels: ``nvidia/*/lib`` (CUDA, cuDNN) and ``tensorrt_libs``."""
    found = []
    for root in site_packages() if search is None else search:
        found += sorted((root / "nvidia").glob(f"*/lib/{soname}")) + sorted((root / "tensorrt_libs").glob(soname))
    return found


# ----- what the provider libraries link ----------------------------------------------------------

_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")


def parse_ldd(text: str) -> dict[str, str | None]:
    """soname -> resolved path, or None for ``not found``."""
    resolved: dict[str, str | None] = {}
    for line in text.splitlines():
        match = _LDD_LINE.match(line)
        if match:
            resolved[match.group(1)] = None if match.group(2) == "not found" else match.group(2)
    return resolved


@dataclass(frozen=True)
class LinkCheck:
    library: Path
    unresolved: tuple[str, ...] = ()
    error: str = ""  # ldd missing or failing: the check could not be made
    resolved: dict[str, str] = field(default_factory=dict)


def check_links(library: Path) -> LinkCheck:
    """Does every library ``library`` links resolve with this environment's loader path?"""
    ldd = shutil.which("ldd")
    if ldd is None:
        return LinkCheck(library, error="ldd not on PATH")
    try:
        result = subprocess.run([ldd, str(library)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return LinkCheck(library, error=str(exc))
    links = parse_ldd(result.stdout)
    if result.returncode != 0 and not links:
        return LinkCheck(library, error=(result.stderr or result.stdout).strip() or f"ldd exited {result.returncode}")
    return LinkCheck(library, tuple(name for name, path in links.items() if path is None),
                     resolved={name: path for name, path in links.items() if path})
