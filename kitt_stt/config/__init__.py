"""Configuration: the pydantic schema (``schema``) and the YAML/overlay/env loader (``loader``)."""

from kitt_stt.config.loader import ConfigError, load_config
from kitt_stt.config.schema import AppConfig

__all__ = ["AppConfig", "ConfigError", "load_config"]
