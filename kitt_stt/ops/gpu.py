"""The NVIDIA GPUs this process can use, found without onnxruntime, torch or any GPU package.

The CUDA driver API (``libcuda.so.1`` through ctypes) is asked first: it sees exactly the devices
onnxruntime will see (it honours ``CUDA_VISIBLE_DEVICES``, which ``asr.cuda.device_id`` counts
in) and it is what Jetson has, where nvidia-smi may not report the compute capability.
``nvidia-smi`` is the fallback for hosts whose driver library is not on the loader path. Neither
being there is the normal CPU-host answer, "no GPU", never an exception.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import dataclass

from kitt_stt.ops.libraries import decode_cuda_version

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
NVIDIA_SMI_TIMEOUT_S = 15


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str  # "8.9"; "" when the source could not tell
    memory_mib: int | None = None


@dataclass(frozen=True)
class GpuProbe:
    gpus: tuple[Gpu, ...]
    source: str  # "CUDA driver" | "nvidia-smi" | ""
    driver_cuda_version: str | None  # the newest CUDA the driver supports, e.g. "12.4"
    problems: tuple[str, ...]  # why each source found nothing

    def device(self, index: int) -> Gpu | None:
        return next((gpu for gpu in self.gpus if gpu.index == index), None)

    def summary(self) -> str:
        if not self.gpus:
            return "no GPU (" + "; ".join(self.problems or ("nothing found",)) + ")"
        return "; ".join(f"{gpu.index}: {gpu.name} (compute capability {gpu.compute_capability or '?'})"
                         for gpu in self.gpus)


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """Rows of ``--query-gpu=name,compute_cap,memory.total --format=csv,noheader,nounits``."""
    gpus = []
    for index, line in enumerate(row for row in text.splitlines() if row.strip()):
        name, _, rest = line.partition(",")
        cap, _, memory = (part.strip() for part in rest.partition(","))
        cap = cap if cap and cap[0].isdigit() else ""  # "[N/A]" or "[Not Supported]"
        gpus.append(Gpu(index, name.strip(), cap, int(float(memory)) if memory.replace(".", "").isdigit() else None))
    return tuple(gpus)


def probe_gpus() -> GpuProbe:
    driver = _probe_driver()
    if driver.gpus:
        return driver
    smi = _probe_nvidia_smi()
    if smi.gpus:
        return GpuProbe(smi.gpus, smi.source, driver.driver_cuda_version, driver.problems)
    return GpuProbe((), "", driver.driver_cuda_version, driver.problems + smi.problems)


def _probe_driver() -> GpuProbe:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return GpuProbe((), "", None, ("libcuda.so.1 (NVIDIA driver) not found",))
    version = ctypes.c_int()
    driver_version = decode_cuda_version(version.value) if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0 \
        else None
    status = cuda.cuInit(0)
    if status != 0:
        return GpuProbe((), "", driver_version, (f"cuInit failed: {_cu_error(cuda, status)}",))
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return GpuProbe((), "", driver_version, ("the CUDA driver sees no device",))
    gpus = []
    for index in range(count.value):
        device = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(device), index)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, len(name), device)
        major, minor, memory = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        cuda.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        has_memory = cuda.cuDeviceTotalMem_v2(ctypes.byref(memory), device) == 0
        gpus.append(Gpu(index, name.value.decode(errors="replace"), f"{major.value}.{minor.value}",
                        memory.value >> 20 if has_memory else None))
    return GpuProbe(tuple(gpus), "CUDA driver", driver_version, ())


def _cu_error(cuda: ctypes.CDLL, status: int) -> str:
    name = ctypes.c_char_p()
    if cuda.cuGetErrorName(status, ctypes.byref(name)) == 0 and name.value:
        return f"{name.value.decode()} ({status})"
    return f"CUresult {status}"


def _probe_nvidia_smi() -> GpuProbe:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuProbe((), "", None, ("nvidia-smi not on PATH",))
    for fields in ("name,compute_cap,memory.total", "name"):  # old drivers know no compute_cap
        try:
            result = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                                    capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return GpuProbe((), "", None, (f"nvidia-smi failed: {exc}",))
        if result.returncode == 0:
            gpus = parse_nvidia_smi(result.stdout)
            return GpuProbe(gpus, "nvidia-smi", None, () if gpus else ("nvidia-smi lists no GPU",))
    message = (result.stdout + result.stderr).strip().splitlines()
    return GpuProbe((), "", None, (f"nvidia-smi failed: {message[0] if message else result.returncode}",))
