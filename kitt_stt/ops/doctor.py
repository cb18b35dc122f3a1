"""``kitt-stt doctor``: what this host can do, checked against what the configuration asks for.

The exit status is 1 exactly when the configuration needs something the host lacks: a GPU
provider without the GPU build of onnxruntime, without the CUDA/cuDNN/TensorRT libraries its
providers link, or (unless ``--no-device``) without a GPU; a configured EP-context model that
is not there; a TensorRT cache that can be neither written nor read. Models that are not
installed are warnings: the server installs registry models on first start, and deployments
mount model volumes at run time. ``--no-device`` is for image builds, where libraries, providers,
models and caches can be checked but no GPU is attached.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict

import onnxruntime as ort

from kitt_stt.asr.providers import ORT_NAMES
from kitt_stt.config.schema import AppConfig, Provider
from kitt_stt.ops.gpu import GpuProbe, probe_gpus
from kitt_stt.ops.libraries import (
    LibraryStatus,
    LinkCheck,
    OrtInfo,
    check_links,
    cuda_major,
    driver_library,
    onnxruntime_info,
    probe_libraries,
)
from kitt_stt.ops.model_files import ModelLocation, locate_model
from kitt_stt.ops.report import Report, Status
from kitt_stt.ops.trt_cache import (
    EngineLayout,
    TrtHost,
    engine_key,
    engine_layout,
    read_manifest,
    usable_ep_context,
)
from kitt_stt.ops.writable import writable
from kitt_stt.turn.combiner import CombinerError
from kitt_stt.turn.policy_factory import text_model_spec


def needed_providers(config: AppConfig) -> set[str]:
    """"cuda" and/or "tensorrt": what the configuration makes the host provide (TensorRT needs CUDA too)."""
    needs = set()
    if config.asr.provider is Provider.TENSORRT:
        needs |= {"cuda", "tensorrt"}
    if Provider.CUDA in (config.asr.provider, config.turn.provider):
        needs.add("cuda")
    return needs


TEXT_VIEW_PROBE = "open the window"


def run_doctor(config: AppConfig, config_label: str, no_device: bool = False) -> Report:
    needs = needed_providers(config)
    report = Report(f"kitt-stt doctor: {config_label}; asr.provider={config.asr.provider}, "
                    f"turn.provider={config.turn.provider}{'; --no-device' if no_device else ''}")
    report.facts["needs"] = sorted(needs)
    report.add("host", "python", Status.INFO, f"{platform.python_version()} ({sys.executable}), {platform.machine()}")
    info = onnxruntime_info()
    links = _check_onnxruntime(report, info, needs, no_device)
    _check_libraries(report, probe_libraries(cuda_major(info)), links, needs, no_device)
    gpus = probe_gpus()
    device_ok = _check_gpu(report, gpus, config.asr.cuda.device_id, needs, no_device)
    if device_ok and needs:
        _check_sessions(report, needs, config.asr.cuda.device_id, info)
    models = _check_models(report, config)
    _check_caches(report, config, needs, models, gpus, info)
    return report


# ----- onnxruntime and libraries -----------------------------------------------------------------

def _check_onnxruntime(report: Report, info: OrtInfo, needs: set[str], no_device: bool) -> list[LinkCheck]:
    report.facts["onnxruntime"] = {**asdict(info), "provider_libraries": {k: str(v) for k, v in
                                                                          info.provider_libraries.items()}}
    build = f"CUDA {info.built_with_cuda} build" if info.built_with_cuda else "no CUDA in this build"
    report.add("onnxruntime", "package", Status.OK, f"{info.package} {info.version} ({build})")
    if len(info.installed) > 1:
        report.warn("onnxruntime", "packages", f"{', '.join(info.installed)} are all installed; they share the "
                    "`onnxruntime` module and the last one installed wins: keep only one")
    report.add("onnxruntime", "providers", Status.INFO, ", ".join(info.providers))
    for need in sorted(needs):
        name = ORT_NAMES[Provider(need)]
        if name in info.providers:
            report.add("onnxruntime", name, Status.OK, "compiled in")
        else:
            report.fail("onnxruntime", name, f"not in {info.package} {info.version}: install the GPU build "
                        "(`pip install 'kitt-stt[gpu]'`, without the CPU onnxruntime wheel)", name)
    checks = []
    for provider, library in sorted(info.provider_libraries.items()):
        check = check_links(library)
        checks.append(check)
        needed = any(ORT_NAMES[Provider(need)] == provider for need in needs)
        if check.error:
            report.add("onnxruntime", library.name, Status.WARN if needed else Status.INFO,
                       f"links not checked: {check.error}")
        elif check.unresolved:
            detail = f"links {', '.join(check.unresolved)}: not found by the loader (LD_LIBRARY_PATH)"
            lacking = [name for name in check.unresolved if not (no_device and driver_library(name))]
            if needed and lacking:
                for name in lacking:
                    report.fail("onnxruntime", library.name, detail, name)
            else:
                report.add("onnxruntime", library.name, Status.INFO, detail + (
                    " (driver libraries: mounted at run time, not checked with --no-device)" if needed else ""))
        else:
            report.add("onnxruntime", library.name, Status.OK, "every library it links resolves")
    return checks


def _check_libraries(report: Report, libraries: list[LibraryStatus], links: list[LinkCheck], needs: set[str],
                     no_device: bool = False) -> None:
    resolved = {name: path for check in links for name, path in check.resolved.items()}
    facts = []
    for lib in libraries:
        path, version, note, found = lib.path, lib.version, lib.note, lib.loadable
        if not found and lib.soname in resolved:  # the provider library finds it (its RUNPATH)
            path, note, found = resolved[lib.soname], "found through onnxruntime's provider library", True
        facts.append({"name": lib.name, "soname": lib.soname, "found": found, "path": path, "version": version,
                      "note": note})
        item = f"{lib.name} ({lib.spec.label})"
        if found:
            report.add("libraries", item, Status.OK, " ".join(filter(None, [version, path, note and f"({note})"])))
        elif no_device and lib.lacks_only_driver:  # Jetson: TensorRT links driver libraries
            report.add("libraries", item, Status.INFO, f"{lib.soname} is there but links the driver's "
                       f"{lib.lacks_only_driver}, mounted at run time (not checked with --no-device)")
        elif lib.spec.needed_by & needs:
            report.fail("libraries", item, f"{lib.soname}: {note}", lib.soname)
        else:
            report.add("libraries", item, Status.INFO, f"{lib.soname}: {note}")
    report.facts["libraries"] = facts


# ----- the GPU -----------------------------------------------------------------------------------

def _check_gpu(report: Report, gpus: GpuProbe, device_id: int, needs: set[str], no_device: bool) -> bool:
    """Report the GPUs; True when the configured device is there (and the sessions can be tried)."""
    report.facts["gpu"] = {**asdict(gpus), "device_id": device_id}
    if gpus.driver_cuda_version:
        report.add("gpu", "driver", Status.INFO, f"supports CUDA up to {gpus.driver_cuda_version}")
    for gpu in gpus.gpus:
        memory = f", {gpu.memory_mib} MiB" if gpu.memory_mib else ""
        report.add("gpu", f"device {gpu.index}", Status.OK,
                   f"{gpu.name}, compute capability {gpu.compute_capability or '?'}{memory} (from {gpus.source})")
    device = gpus.device(device_id)
    if no_device:
        if not gpus.gpus:
            report.add("gpu", "device", Status.INFO, f"not checked (--no-device): {gpus.summary()}")
        return False
    if device is not None:
        return True
    detail = gpus.summary() if not gpus.gpus else f"asr.cuda.device_id={device_id}: no such device ({gpus.summary()})"
    if needs:
        report.fail("gpu", "device", detail, detail if not gpus.gpus else f"GPU device {device_id}")
    else:
        report.add("gpu", "device", Status.INFO, detail)
    return False


def _check_sessions(report: Report, needs: set[str], device_id: int, info: OrtInfo) -> None:
    """Create a one-node session on each needed provider: the libraries load and the device
    works, which neither "compiled in" nor "the file exists" proves."""
    for need in sorted(needs):
        name = ORT_NAMES[Provider(need)]
        if name not in info.providers:
            continue
        error = session_smoke_test(need, device_id)
        if error:
            report.fail("gpu", f"{name} session", error, f"a working {name} session")
        else:
            report.add("gpu", f"{name} session", Status.OK, "created on the GPU and ran")


def session_smoke_test(provider: str, device_id: int) -> str:
    """"" when a tiny MatMul session runs on ``provider``; otherwise what went wrong."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "smoke",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime the service supports
    cuda = ("CUDAExecutionProvider", {"device_id": str(device_id)})
    chain = [cuda] if provider == "cuda" else [
        ("TensorrtExecutionProvider", {"device_id": str(device_id), "trt_engine_cache_enable": "0"}), cuda]
    wanted = ORT_NAMES[Provider(provider)]
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=chain)
        session.run(None, {"x": np.ones((1, 4), np.float32)})
    except Exception as exc:  # onnxruntime raises its own hierarchy, RuntimeError among others
        return f"session failed: {exc}"
    active = session.get_providers()
    return "" if active and active[0] == wanted else f"the session fell back to {', '.join(active)}"


# ----- models and caches -------------------------------------------------------------------------

def _check_models(report: Report, config: AppConfig) -> list[ModelLocation]:
    settings = [("asr.model", config.asr.model)] + ([("turn.model", config.turn.model)] if config.turn.model else [])
    try:
        text_model = text_model_spec(config, has_model=config.turn.model is not None)
    except CombinerError as exc:  # serve refuses to start on these weights
        report.fail("models", "turn.fused_weights", str(exc), "usable turn.fused_weights")
        text_model = None
    if text_model is not None:
        settings.append(("turn.text_model", text_model))
    locations = [locate_model(spec, config.models, setting) for setting, spec in settings]
    for location in locations:
        item = f"{location.setting}={location.spec}"
        if not location.present or location.problem:
            report.warn("models", item, f"{location.problem} ({location.directory})")
        else:
            report.add("models", item, Status.OK, str(location.directory))
        for file in location.files:
            report.add("models", f"  {file.path.name}", Status.WARN if file.modified else Status.INFO,
                       f"sha256 {file.sha256}, {file.size:,} bytes")
        if location.setting == "turn.text_model" and location.present and not location.problem:
            _check_text_view(report, location, config.turn.num_threads)
    report.facts["models"] = [{**asdict(location), "directory": str(location.directory),
                               "files": [{**asdict(file), "path": str(file.path)} for file in location.files]}
                              for location in locations]
    return locations


def _check_text_view(report: Report, location: ModelLocation, num_threads: int) -> None:
    """Load the text view and score one phrase: intact files can still need a newer onnxruntime
    (its graph uses GroupQueryAttention and MatMulNBits), which only running it shows."""
    from kitt_stt.turn.text_model import TextModelError, TurnTextModel

    try:
        answer = TurnTextModel(location.directory, num_threads).end_of_turn(TEXT_VIEW_PROBE)
    except TextModelError as exc:
        report.fail("models", "  text view", str(exc), "a text model this onnxruntime can run")
        return
    except Exception as exc:  # it loaded but cannot score: the decision would have no text view
        report.fail("models", "  text view", f"scoring {TEXT_VIEW_PROBE!r} failed: {type(exc).__name__}: {exc}",
                    "a text model this onnxruntime can run")
        return
    scored = "no words" if answer is None else f"end log-odds {answer.log_odds:.1f}, {answer.ms:.0f} ms"
    report.add("models", "  text view", Status.OK, f"{TEXT_VIEW_PROBE!r}: {scored} (onnxruntime {ort.__version__})")


def _check_caches(report: Report, config: AppConfig, needs: set[str], models: list[ModelLocation],
                  gpus: GpuProbe, info: OrtInfo) -> None:
    from kitt_stt.models.registry import default_cache_dir

    model_cache = config.models.cache_dir or default_cache_dir()
    usable, how = writable(model_cache)
    if usable:
        report.add("caches", "model cache", Status.OK, how)
    else:
        report.warn("caches", "model cache", f"{how} (models already there still load; none can be installed)")
    trt = config.asr.tensorrt
    layout, unknown = _tensorrt_layout(config, models, gpus, info, report)
    ready = (trt.ep_context_model is not None and trt.ep_context_model.is_file()) or \
        (layout is not None and usable_ep_context(layout.ep_context_model))
    for item, root in (("TensorRT engines", trt.engine_root()), ("TensorRT timing cache", trt.timing_root())):
        usable, how = writable(root)
        if usable:
            report.add("caches", item, Status.OK, how)
        elif "tensorrt" in needs and not ready:
            report.fail("caches", item, f"{how}: every start would build the engine", f"a writable {root}")
        else:
            report.add("caches", item, Status.INFO, how)
    if "tensorrt" in needs:
        _report_tensorrt(report, config, layout, unknown)


def _tensorrt_layout(config: AppConfig, models: list[ModelLocation], gpus: GpuProbe, info: OrtInfo,
                     report: Report) -> tuple[EngineLayout | None, list[str]]:
    """The keyed engine directory this host would use, or which facts of its key are unknown."""
    gpu = gpus.device(config.asr.cuda.device_id)
    trt_version = next((lib["version"] for lib in report.facts.get("libraries", []) if lib["name"] == "libnvinfer"
                        and lib["version"]), None)
    model_sha = _tensorrt_model_sha(models[0])
    unknown = [what for what, value in (("GPU", gpu), ("TensorRT version", trt_version), ("model", model_sha))
               if value is None]
    if gpu is None or trt_version is None or model_sha is None:
        return None, unknown
    host = TrtHost(gpu.name, gpu.compute_capability, trt_version, info.version)
    return engine_layout(config.asr.tensorrt, engine_key(host, config.asr, model_sha)), []


def _report_tensorrt(report: Report, config: AppConfig, layout: EngineLayout | None, unknown: list[str]) -> None:
    trt = config.asr.tensorrt
    report.add("tensorrt", "cache_dir", Status.INFO, str(trt.cache_dir))
    if trt.ep_context_model is not None:
        if trt.ep_context_model.is_file():
            report.add("tensorrt", "ep_context_model", Status.OK, f"configured: {trt.ep_context_model}")
        else:
            report.fail("tensorrt", "ep_context_model", f"configured but not there: {trt.ep_context_model}",
                        f"asr.tensorrt.ep_context_model {trt.ep_context_model}")
        return
    if layout is None:
        report.add("tensorrt", "engine directory", Status.INFO,
                   f"under {trt.engine_root()}; its key needs the {', '.join(unknown)}, unknown here")
        return
    ready = usable_ep_context(layout.ep_context_model)
    report.facts["tensorrt"] = {"engine_dir": str(layout.engine_dir), "key": layout.key.as_dict(),
                                "ep_context_ready": ready, "manifest": read_manifest(layout)}
    state = "EP-context model ready" if ready else "no EP-context model yet: `kitt-stt trt build` writes it"
    report.add("tensorrt", "engine directory", Status.OK if ready else Status.INFO, f"{layout.engine_dir} ({state})")


def _tensorrt_model_sha(location: ModelLocation) -> str | None:
    """sha256 of the file the TensorRT engine is built from (the fp32 model.onnx when there)."""
    from kitt_stt.asr.sense_voice_model import ModelError, find_model_file

    if not location.present:
        return None
    try:
        path = find_model_file(location.directory, prefer_int8=False)
    except ModelError:
        return None
    return location.sha256_of(path)

