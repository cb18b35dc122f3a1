"""Execution provider options of the ``asr:`` section (``asr.cuda``, ``asr.tensorrt``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from kitt_stt.config.section import Section


class CudaOptions(Section):
    """onnxruntime CUDA execution provider options (``asr.cuda``)."""

    device_id: int = Field(default=0, ge=0)
    gpu_mem_limit_mb: int | None = Field(default=None, ge=256)
    arena_extend_strategy: str = "kSameAsRequested"
    cudnn_conv_algo_search: str = "HEURISTIC"


class TensorRTOptions(Section):
    """onnxruntime TensorRT execution provider options (``asr.tensorrt``).

    The optimisation profile covers ``x`` [batch, T, 560] with T in LFR frames (60 ms each):
    1 / 100 / 2000 frames is 60 ms / 6 s / 120 s of audio; batch up to ``asr.max_batch``.

    Caches live under one absolute ``cache_dir`` (a persistent volume in the images), because a
    relative path lands wherever the process happens to start and an engine there is lost with
    the container. ``engine_cache_path`` / ``timing_cache_path`` stay for existing deployments: unset,
    they are ``<cache_dir>/engines`` and ``<cache_dir>/timing``; relative, they are taken under
    ``cache_dir``. The engine itself goes one level deeper, into a directory keyed by GPU, TensorRT,
    onnxruntime, the model's sha256 and the build options (``kitt_stt/ops/trt_key.py``), because
    onnxruntime's own cache check covers none of the weights.
    """

    fp16: bool = True
    cache_dir: Path = Path("/var/cache/kitt-stt/trt")
    engine_cache_path: Path | None = None
    timing_cache_path: Path | None = None
    max_workspace_mb: int = Field(default=4096, ge=64)
    builder_optimization_level: int = Field(default=3, ge=0, le=5)
    profile_min_frames: int = Field(default=1, ge=1)
    profile_opt_frames: int = Field(default=100, ge=1)
    profile_max_frames: int = Field(default=2000, ge=1)
    ep_context_model: Path | None = None

    @field_validator("cache_dir")
    @classmethod
    def _absolute_cache_dir(cls, value: Path) -> Path:
        """A relative cache_dir is pinned to the working directory at load time, once."""
        return value.expanduser().absolute()

    def engine_root(self) -> Path:
        """Where keyed engine directories go: absolute, whatever the process's working directory."""
        return self._under_cache_dir(self.engine_cache_path, "engines")

    def timing_root(self) -> Path:
        """Where keyed timing-cache directories go (timing caches are shared by models)."""
        return self._under_cache_dir(self.timing_cache_path, "timing")

    def _under_cache_dir(self, path: Path | None, default: str) -> Path:
        if path is None:
            return self.cache_dir / default
        path = path.expanduser()
        return path if path.is_absolute() else self.cache_dir / path

    @model_validator(mode="after")
    def _ordered_profile(self) -> TensorRTOptions:
        if not self.profile_min_frames <= self.profile_opt_frames <= self.profile_max_frames:
            raise ValueError("profile frames must satisfy min <= opt <= max")
        return self
