"""The TensorRT engine cache key: which facts make an engine reusable, and its directory name.

onnxruntime names engine files after the graph and the compute capability only; its docs tell
users to clear the cache by hand when the model, onnxruntime, TensorRT or the GPU changes. A
model replaced under the same path therefore silently reuses the old engine, and so does an EP-
context model, which skips onnxruntime's checks altogether. So every fact an engine depends on
goes into the directory name: GPU model and compute capability, TensorRT and onnxruntime
versions, the model file's sha256, and the builder options that shape the engine (precision,
workspace, optimisation level, profile shapes: an engine built for batch 4 cannot run batch 8).

Everything here is pure (facts in, names out) so the key can be tested without a GPU.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: TensorRT EP options that change the engine TensorRT builds (paths and cache switches do not).
ENGINE_SHAPING_OPTIONS = (
    "trt_fp16_enable",
    "trt_max_workspace_size",
    "trt_builder_optimization_level",
    "trt_profile_min_shapes",
    "trt_profile_opt_shapes",
    "trt_profile_max_shapes",
)
KEY_FORMAT = 1  # bump when the meaning of the key changes, so old directories are never matched


@dataclass(frozen=True)
class EngineKey:
    """Everything a built TensorRT engine depends on."""

    gpu_name: str
    compute_capability: str  # "8.7"
    tensorrt_version: str  # "10.3.0"
    onnxruntime_version: str  # "1.23.0"
    model_sha256: str
    build_options: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["build_options"] = dict(sorted(self.build_options.items()))
        return {"format": KEY_FORMAT, **data}

    @property
    def digest(self) -> str:
        """sha256 of the whole key, canonical JSON: any change to any fact changes it."""
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def build_options(tensorrt_options: Mapping[str, str]) -> dict[str, str]:
    """The engine-shaping subset of the options handed to the TensorRT EP."""
    return {name: tensorrt_options[name] for name in ENGINE_SHAPING_OPTIONS if name in tensorrt_options}


def _slug(text: str, limit: int = 32) -> str:
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return slug[:limit].rstrip("-.") or "unknown"


def _sm(compute_capability: str) -> str:
    return "sm" + (re.sub(r"[^0-9]", "", compute_capability) or "unknown")


def timing_dir_name(gpu_name: str, compute_capability: str, tensorrt_version: str) -> str:
    """Timing caches hold kernel timings: valid across models, not across GPUs or TensorRT versions."""
    return f"{_slug(gpu_name)}-{_sm(compute_capability)}_trt{_slug(tensorrt_version, 16)}"


def engine_dir_name(key: EngineKey) -> str:
    """A readable, unique directory name, e.g.
    ``nvidia-geforce-rtx-4090-sm89_trt10.14.1_ort1.26.0_model-3f2a9c1b7d4e_k-0c1d2e3f``.

    The readable parts say what the engine is for at a glance (``ls`` on the volume); the final
    short hash covers the whole key, including what the readable parts abbreviate or leave out
    (the full GPU name, the build options), so two different keys never share a directory.
    """
    return (f"{timing_dir_name(key.gpu_name, key.compute_capability, key.tensorrt_version)}"
            f"_ort{_slug(key.onnxruntime_version, 16)}_model-{key.model_sha256[:12]}_k-{key.digest[:8]}")
