"""Configuration: the pydantic schema (``schema``, the top-level ``AppConfig`` and most sections;
``server_config`` for ``server:``, ``execution`` for the CUDA/TensorRT provider options,
``section`` for their common base) and the YAML/overlay/env loader (``loader``)."""

from kitt_stt.config.loader import ConfigError, load_config
from kitt_stt.config.schema import AppConfig

__all__ = ["AppConfig", "ConfigError", "load_config"]
