"""onnxruntime execution providers from config, and the check that a session really uses them.

onnxruntime quietly falls back to the CPU when a requested provider cannot be created (missing
CUDA libraries, a CPU-only wheel).  A service that was asked for a GPU and silently runs on the
CPU is slower by an order of magnitude and nobody notices; so after a session is created we
read ``session.get_providers()`` and refuse to start unless the first one is the requested one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime as ort

from kitt_stt.config.schema import AsrConfig, Provider

ORT_NAMES = {
    Provider.CPU: "CPUExecutionProvider",
    Provider.CUDA: "CUDAExecutionProvider",
    Provider.TENSORRT: "TensorrtExecutionProvider",
}
FEATURE_DIM = 560


class ProviderError(Exception):
    """The requested execution provider is not available or not in use."""


def _shapes(batch: int, frames: int) -> str:
    return f"x:{batch}x{frames}x{FEATURE_DIM},x_length:{batch},language:{batch},text_norm:{batch}"


def cuda_options(config: AsrConfig) -> dict[str, str]:
    cuda = config.cuda
    options = {
        "device_id": str(cuda.device_id),
        "arena_extend_strategy": cuda.arena_extend_strategy,
        "cudnn_conv_algo_search": cuda.cudnn_conv_algo_search,
    }
    if cuda.gpu_mem_limit_mb is not None:
        options["gpu_mem_limit"] = str(cuda.gpu_mem_limit_mb * 1024 * 1024)
    return options


def tensorrt_options(config: AsrConfig) -> dict[str, str]:
    """TensorRT EP options; the profile covers batch 1..``max_batch`` and T min/opt/max frames.

    The cache paths are absolute: ``kitt-stt serve`` and ``kitt-stt trt build`` first point them at
    the keyed engine directory (``kitt_stt.ops.trt_cache``); unkeyed, they are the cache roots.
    """
    trt = config.tensorrt
    return {
        "device_id": str(config.cuda.device_id),
        "trt_fp16_enable": "1" if trt.fp16 else "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": str(trt.engine_root()),
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": str(trt.timing_root()),
        "trt_max_workspace_size": str(trt.max_workspace_mb * 1024 * 1024),
        "trt_builder_optimization_level": str(trt.builder_optimization_level),
        "trt_profile_min_shapes": _shapes(1, trt.profile_min_frames),
        "trt_profile_opt_shapes": _shapes(1, trt.profile_opt_frames),
        "trt_profile_max_shapes": _shapes(config.max_batch, trt.profile_max_frames),
    }


def provider_chain(config: AsrConfig) -> list[tuple[str, dict[str, Any]]]:
    """Providers in priority order.  TensorRT is backed by CUDA for nodes it cannot take; the
    CPU provider is never listed for a GPU request (onnxruntime adds it for unsupported nodes)."""
    if config.provider is Provider.CPU:
        return [("CPUExecutionProvider", {})]
    if config.provider is Provider.CUDA:
        return [("CUDAExecutionProvider", cuda_options(config))]
    return [("TensorrtExecutionProvider", tensorrt_options(config)), ("CUDAExecutionProvider", cuda_options(config))]


def check_available(provider: Provider) -> None:
    wanted = ORT_NAMES[provider]
    available = ort.get_available_providers()
    if wanted not in available:
        raise ProviderError(
            f"asr.provider={provider.value}: this onnxruntime build has no {wanted} "
            f"(available: {', '.join(available)}). Install the GPU build (`pip install 'kitt-stt[gpu]'`, "
            "CUDA 12 + cuDNN 9; TensorRT 10 for tensorrt) or set asr.provider: cpu"
        )


def check_active(session: ort.InferenceSession, provider: Provider) -> None:
    wanted = ORT_NAMES[provider]
    active = session.get_providers()
    if not active or active[0] != wanted:
        raise ProviderError(
            f"asr.provider={provider.value}: the session runs on {', '.join(active) or 'nothing'}, not {wanted} "
            "(onnxruntime fell back; check the CUDA/TensorRT libraries and the log above). Refusing to run "
            "on the CPU silently"
        )


def ep_context_options(config: AsrConfig, output: Path) -> dict[str, str]:
    """TensorRT options that also dump an EP-context model: an ONNX file that references the
    built engine, so a pod can load it (seconds) instead of building (a minute on Orin).

    While dumping, onnxruntime reads ``trt_engine_cache_path`` relative to the EP-context model's
    directory, and when loading it refuses an engine reference that is absolute or contains
    ``..``; so the engine is written next to ``output`` (``.``), and the pair can be moved together.
    """
    return {
        **tensorrt_options(config),
        "trt_engine_cache_path": ".",
        "trt_dump_ep_context_model": "1",
        "trt_ep_context_file_path": str(output.absolute()),
        "trt_ep_context_embed_mode": "0",
    }


def profile_longest_ms(config: AsrConfig) -> int | None:
    """The longest audio the TensorRT profile takes (60 ms an LFR frame); None off TensorRT."""
    return config.tensorrt.profile_max_frames * 60 if config.provider is Provider.TENSORRT else None


def check_profile_covers_segments(config: AsrConfig, max_segment_ms: int) -> None:
    """Every segment must fit the TensorRT profile: ceil(max_segment_ms / 60 ms) LFR frames."""
    if config.provider is not Provider.TENSORRT:
        return
    needed = -(-max_segment_ms // 60)
    if needed > config.tensorrt.profile_max_frames:
        raise ProviderError(
            f"vad.max_segment_ms={max_segment_ms} needs {needed} LFR frames but asr.tensorrt.profile_max_frames is "
            f"{config.tensorrt.profile_max_frames}; raise the profile or lower vad.max_segment_ms"
        )


def build_ep_context(model_path: Path, config: AsrConfig, output: Path) -> Path:
    """Build the TensorRT engine for ``model_path`` and write it and its EP-context model ``output``
    into ``output``'s directory (the timing cache goes to ``config``'s timing path).

    ``kitt-stt trt build`` calls this through ``kitt_stt.ops.trt_cache.build_keyed``, which picks
    the keyed directory, clears stale engines first and renames ``output`` into place when done.
    """
    check_available(Provider.TENSORRT)
    output.parent.mkdir(parents=True, exist_ok=True)
    config.tensorrt.timing_root().mkdir(parents=True, exist_ok=True)
    chain = [("TensorrtExecutionProvider", ep_context_options(config, output)),
             ("CUDAExecutionProvider", cuda_options(config))]
    session = ort.InferenceSession(str(model_path), providers=chain)
    check_active(session, Provider.TENSORRT)
    if not output.is_file():
        raise ProviderError(f"TensorRT built the engine but wrote no EP-context model at {output}")
    return output
