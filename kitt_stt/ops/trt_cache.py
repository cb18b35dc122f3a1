"""The keyed TensorRT engine directory: building into it (``trt build``) and finding it (``serve``).

Layout under ``asr.tensorrt.cache_dir`` (default ``/var/cache/kitt-stt/trt``, a volume)::

    engines/<engine_dir_name(key)>/   the engine and profile files onnxruntime writes,
                                      model.trt_ctx.onnx (the EP-context model) and key.json
    timing/<gpu>-sm<cc>_trt<version>/ TensorRT's timing cache, shared by every model

``kitt-stt trt build`` builds into the keyed directory under a file lock, writing the EP-context
model under a temporary name and renaming it when complete, so its presence means a whole build.
``kitt-stt serve`` computes the same key before it builds the engine and, unless
``asr.tensorrt.ep_context_model`` names a file explicitly, loads the EP-context model from the
keyed directory when it is there, or else builds from the ONNX model with the engine cache in
that directory (a later start then finds the engine: a cache-warm load). A different model,
GPU, TensorRT, onnxruntime or profile gives a different directory, so nothing stale is reused.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort
from filelock import FileLock

from kitt_stt.asr.providers import ProviderError, build_ep_context, check_available, tensorrt_options
from kitt_stt.config.execution import TensorRTOptions
from kitt_stt.config.schema import AppConfig, AsrConfig, Engine, Provider
from kitt_stt.models.checksums import sha256_file
from kitt_stt.ops.gpu import probe_gpus
from kitt_stt.ops.libraries import cuda_major, onnxruntime_info, tensorrt_version
from kitt_stt.ops.trt_key import EngineKey, build_options, engine_dir_name, timing_dir_name

EP_CONTEXT_NAME = "model.trt_ctx.onnx"
PARTIAL_NAME = ".model.trt_ctx.partial.onnx"
MANIFEST_NAME = "key.json"
ENGINE_FILE_SUFFIXES = (".engine", ".profile")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrtHost:
    """The host facts in the key: which GPU and which TensorRT and onnxruntime will build."""

    gpu_name: str
    compute_capability: str
    tensorrt_version: str
    onnxruntime_version: str


def probe_trt_host(device_id: int) -> TrtHost:
    """This host's facts for ``device_id``; ProviderError when the GPU or TensorRT is not there."""
    gpus = probe_gpus()
    gpu = gpus.device(device_id)
    if gpu is None:
        raise ProviderError(f"no GPU: asr.cuda.device_id={device_id} is not a device here ({gpus.summary()})")
    version = tensorrt_version(cuda_major(onnxruntime_info()))
    if version is None:
        raise ProviderError("TensorRT's libnvinfer is not found by the loader (LD_LIBRARY_PATH); `kitt-stt doctor` "
                            "shows what is installed where")
    return TrtHost(gpu.name, gpu.compute_capability, version, ort.__version__)


@dataclass(frozen=True)
class EngineLayout:
    key: EngineKey
    engine_dir: Path
    timing_dir: Path

    @property
    def ep_context_model(self) -> Path:
        return self.engine_dir / EP_CONTEXT_NAME

    @property
    def manifest(self) -> Path:
        return self.engine_dir / MANIFEST_NAME

    @property
    def lock(self) -> Path:
        return self.engine_dir.with_name(self.engine_dir.name + ".lock")


def engine_key(host: TrtHost, asr: AsrConfig, model_sha256: str) -> EngineKey:
    return EngineKey(host.gpu_name, host.compute_capability, host.tensorrt_version, host.onnxruntime_version,
                     model_sha256, build_options(tensorrt_options(asr)))


def engine_layout(trt: TensorRTOptions, key: EngineKey) -> EngineLayout:
    """Pure path arithmetic: the keyed directories under the configured cache roots."""
    return EngineLayout(key, trt.engine_root() / engine_dir_name(key),
                        trt.timing_root() / timing_dir_name(key.gpu_name, key.compute_capability,
                                                            key.tensorrt_version))


def layout_for_model(asr: AsrConfig, model_path: Path, host: TrtHost | None = None,
                     model_sha256: str | None = None) -> EngineLayout:
    host = host or probe_trt_host(asr.cuda.device_id)
    return engine_layout(asr.tensorrt, engine_key(host, asr, model_sha256 or sha256_file(model_path)))


def ep_context_engines(ep_context_model: Path) -> list[Path]:
    """The engine files an EP-context model references (``ep_cache_context`` of its EPContext
    nodes, relative to the model's directory); an unreadable model references nothing usable."""
    import onnx

    try:
        model = onnx.load(str(ep_context_model), load_external_data=False)
    except Exception:  # a truncated or foreign file: treat as absent
        return []
    engines = []
    for node in model.graph.node:
        if node.op_type != "EPContext":
            continue
        attributes = {attribute.name: attribute for attribute in node.attribute}
        if "embed_mode" in attributes and attributes["embed_mode"].i == 0 and "ep_cache_context" in attributes:
            engines.append(ep_context_model.parent / attributes["ep_cache_context"].s.decode())
    return engines


def usable_ep_context(ep_context_model: Path) -> bool:
    """Present, and every engine it references is there (a cache cleaned by hand breaks it)."""
    if not ep_context_model.is_file():
        return False
    engines = ep_context_engines(ep_context_model)
    return bool(engines) and all(engine.is_file() for engine in engines)


def keyed_asr(asr: AsrConfig, layout: EngineLayout) -> AsrConfig:
    """``asr`` with the TensorRT caches in the keyed directories, and the EP-context model from
    there when it is usable and none is configured (an explicit ``ep_context_model`` wins)."""
    trt = asr.tensorrt
    update: dict[str, Any] = {"engine_cache_path": layout.engine_dir, "timing_cache_path": layout.timing_dir}
    if trt.ep_context_model is None and usable_ep_context(layout.ep_context_model):
        update["ep_context_model"] = layout.ep_context_model
    return asr.model_copy(update={"tensorrt": trt.model_copy(update=update)})


def write_manifest(layout: EngineLayout, model_path: Path, written_by: str) -> None:
    """key.json: what the directory's key is made of, for people and for ``kitt-stt doctor``."""
    manifest = {
        "directory": layout.engine_dir.name,
        "key": layout.key.as_dict(),
        "key_sha256": layout.key.digest,
        "model_path": str(model_path),
        "ep_context_model": EP_CONTEXT_NAME if layout.ep_context_model.is_file() else None,
        "timing_cache_dir": str(layout.timing_dir),
        "written_by": written_by,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    temporary = layout.manifest.with_name(f".{MANIFEST_NAME}.{os.getpid()}")
    temporary.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(temporary, layout.manifest)


def read_manifest(layout: EngineLayout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.manifest.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ----- trt build ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildResult:
    layout: EngineLayout
    seconds: float
    reused: bool  # the EP-context model for this key was already there


def build_keyed(model_path: Path, asr: AsrConfig, force: bool = False, host: TrtHost | None = None) -> BuildResult:
    """Build the engine and EP-context model into the keyed directory (idempotent unless ``force``:
    an init container that runs on every pod start finds the directory complete and returns)."""
    check_available(Provider.TENSORRT)  # before hashing a large model on a host that cannot build
    layout = layout_for_model(asr, model_path, host)
    layout.engine_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with FileLock(str(layout.lock)):
        if not force and usable_ep_context(layout.ep_context_model):
            return BuildResult(layout, time.perf_counter() - started, reused=True)
        layout.engine_dir.mkdir(exist_ok=True)
        _clear_engines(layout.engine_dir)  # a fresh build: onnxruntime dumps EP context only when it builds
        partial = layout.engine_dir / PARTIAL_NAME
        plain = asr.model_copy(update={"tensorrt": asr.tensorrt.model_copy(update={"ep_context_model": None})})
        build_ep_context(model_path, keyed_asr(plain, layout), partial)
        os.replace(partial, layout.ep_context_model)
        write_manifest(layout, model_path, "kitt-stt trt build")
    return BuildResult(layout, time.perf_counter() - started, reused=False)


def _clear_engines(directory: Path) -> None:
    for path in directory.iterdir():
        if path.suffix in ENGINE_FILE_SUFFIXES or path.name in (EP_CONTEXT_NAME, PARTIAL_NAME):
            path.unlink()


# ----- serve -------------------------------------------------------------------------------------

def prepare_serve(config: AppConfig) -> AppConfig:
    """The configuration ``serve`` builds its engine with: for TensorRT, the keyed directories and,
    when ``trt build`` wrote one, its EP-context model. Anything else is returned unchanged, and
    so is a host without the TensorRT provider (the engine plan refuses that with its own message)."""
    from kitt_stt.asr.sense_voice_model import find_model_file
    from kitt_stt.models.registry import resolve_model

    asr = config.asr
    if asr.provider is not Provider.TENSORRT or asr.engine is Engine.SHERPA:
        return config
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        return config
    if asr.tensorrt.ep_context_model is not None:
        log.info("TensorRT: loading the configured EP-context model %s as it is (not checked against this model, "
                 "GPU or TensorRT; leave asr.tensorrt.ep_context_model unset to use the keyed cache)",
                 asr.tensorrt.ep_context_model)
        return config
    resolved = resolve_model(asr.model, config.models)
    if resolved.kind == "whisper":
        return config
    # the fp32 file, as the engine plan picks it for a GPU; only its path is needed for the key
    model_path = find_model_file(resolved.directory, prefer_int8=False)
    layout = layout_for_model(asr, model_path)
    keyed = keyed_asr(asr, layout)
    if keyed.tensorrt.ep_context_model is not None:
        log.info("TensorRT: loading the EP-context model %s", keyed.tensorrt.ep_context_model)
    else:
        log.info("TensorRT: no EP-context model in %s; building from %s (an engine cached there is reused; "
                 "`kitt-stt trt build` ahead of time makes this start fast)", layout.engine_dir, model_path)
        _prepare_directories(layout, model_path)
    return config.model_copy(update={"asr": keyed})


def _prepare_directories(layout: EngineLayout, model_path: Path) -> None:
    """Create the keyed directories and their manifest; a read-only cache is logged, not fatal
    (onnxruntime then builds in memory every time, which the log makes visible)."""
    try:
        layout.engine_dir.mkdir(parents=True, exist_ok=True)
        layout.timing_dir.mkdir(parents=True, exist_ok=True)
        if not layout.manifest.is_file():
            write_manifest(layout, model_path, "kitt-stt serve")
    except OSError as exc:
        log.warning("TensorRT cache %s is not writable (%s): the engine will be rebuilt on every start",
                    layout.engine_dir, exc)
