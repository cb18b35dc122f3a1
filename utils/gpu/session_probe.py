"""Create one onnxruntime session the way the service does, time it, run it once, and print what
ran where, as one JSON line. Run in its own process by acceptance.py, so every timing starts
cold (no CUDA context, no TensorRT runtime from an earlier session) and ``LD_LIBRARY_PATH`` set
by the parent applies.

    python utils/gpu/session_probe.py --config trt.yaml --model DIR --provider tensorrt --mode ctx

Modes: ``plain`` (the ONNX model; for CUDA), ``warm`` (the ONNX model with the keyed TensorRT
engine cache: a cache-warm load when ``trt build`` ran), ``ctx`` (the EP-context model that
``trt build`` wrote into the keyed directory, as ``kitt-stt serve`` loads it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from kitt_stt.asr.providers import ORT_NAMES, provider_chain  # noqa: E402
from kitt_stt.asr.sense_voice_model import load_sense_voice_model  # noqa: E402
from kitt_stt.config.loader import load_config  # noqa: E402
from kitt_stt.config.schema import AsrConfig, Provider  # noqa: E402
from kitt_stt.ops.trt_cache import keyed_asr, layout_for_model  # noqa: E402
from utils.gpu.placement import load_profile, placement_problem  # noqa: E402

FRAMES = 100  # 6 s of audio in LFR frames: the TensorRT profile's opt shape


def session_target(asr: AsrConfig, model_path: Path, mode: str) -> tuple[AsrConfig, Path, list[Path]]:
    """The config and file to load for ``mode``, and the engine files that a warm load should reuse."""
    if asr.provider is not Provider.TENSORRT:
        return asr, model_path, []
    plain = asr.model_copy(update={"tensorrt": asr.tensorrt.model_copy(update={"ep_context_model": None})})
    layout = layout_for_model(plain, model_path)
    keyed = keyed_asr(plain, layout)
    if mode == "ctx":
        if keyed.tensorrt.ep_context_model is None:
            raise SystemExit(f"no usable EP-context model in {layout.engine_dir}: run `kitt-stt trt build` first")
        return keyed, keyed.tensorrt.ep_context_model, []
    return keyed, model_path, sorted(layout.engine_dir.glob("*.engine"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--provider", required=True, choices=["cpu", "cuda", "tensorrt"])
    parser.add_argument("--mode", default="plain", choices=["plain", "warm", "ctx"])
    args = parser.parse_args()
    config = load_config(args.config).config
    asr = config.asr.model_copy(update={"provider": Provider(args.provider)})
    model = load_sense_voice_model(args.model, prefer_int8=False)
    asr, path, engines = session_target(asr, model.model_path, args.mode)
    before = {engine: engine.stat().st_mtime_ns for engine in engines}
    with tempfile.TemporaryDirectory(prefix="session-probe-") as tmp:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        started = time.perf_counter()
        session = ort.InferenceSession(str(path), options, providers=provider_chain(asr))
        create_s = time.perf_counter() - started
        rng = np.random.default_rng(0)
        feeds = dict(zip([item.name for item in session.get_inputs()][:4], (
            rng.standard_normal((1, FRAMES, 560)).astype(np.float32), np.array([FRAMES], np.int32),
            np.array([0], np.int32), np.array([15], np.int32)), strict=True))
        started = time.perf_counter()
        session.run(None, feeds)
        first_run_s = time.perf_counter() - started
        placement = load_profile(Path(session.end_profiling()))
    wanted = ORT_NAMES[asr.provider]
    providers = session.get_providers()
    problem = placement_problem(placement, wanted)
    if not providers or providers[0] != wanted:
        problem = f"the session runs on {', '.join(providers)}, not {wanted}"
    print(json.dumps({
        "provider": wanted, "mode": args.mode, "file": str(path), "create_s": round(create_s, 2),
        "first_run_s": round(first_run_s, 3), "providers": providers, "placement": placement.describe(),
        "nodes": placement.nodes, "cpu_ops": placement.cpu_ops, "problem": problem,
        "engines_reused": bool(before) and all(engine.stat().st_mtime_ns == mtime for engine, mtime in before.items()),
    }))
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
