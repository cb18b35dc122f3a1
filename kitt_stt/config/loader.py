"""Load the effective configuration: YAML file -> ``extends`` overlays -> environment.

An overlay names its base with ``extends:`` (relative to the overlay, or absolute) and is
deep-merged over it: maps merge key by key, anything else (lists included) replaces.  The
loader remembers which file (or variable) set each key, so a validation error names the file
and the key a person has to fix.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import ValidationError

from kitt_stt.config.schema import AppConfig

CONFIG_ENV = "KITT_STT_CONFIG"
OVERRIDE_PREFIX = "KITT_STT__"
MAX_EXTENDS_DEPTH = 8


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the file."""


@dataclass
class LoadedConfig:
    config: AppConfig
    files: list[Path] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], overlay: Mapping[str, Any], origin: str, origins: dict[str, str],
           prefix: str = "") -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value, origin, origins, f"{dotted}.")
        else:
            merged[key] = value
            _record(value, dotted, origin, origins)
    return merged


def _record(value: Any, dotted: str, origin: str, origins: dict[str, str]) -> None:
    origins[dotted] = origin
    if isinstance(value, Mapping):
        for key, child in value.items():
            _record(child, f"{dotted}.{key}", origin, origins)


def _load_file(path: Path, origins: dict[str, str], files: list[Path], depth: int = 0) -> dict[str, Any]:
    path = path.resolve()
    if path in files:
        raise ConfigError(f"{path}: 'extends' forms a cycle ({' -> '.join(map(str, [*files, path]))})")
    if depth > MAX_EXTENDS_DEPTH:
        raise ConfigError(f"{path}: 'extends' nests deeper than {MAX_EXTENDS_DEPTH} files")
    files.append(path)
    data = _read_yaml(path)
    base: dict[str, Any] = {}
    extends = data.pop("extends", None)
    if extends is not None:
        if not isinstance(extends, str) or not extends:
            raise ConfigError(f"{path}: 'extends' must be a path string")
        base_path = Path(extends)
        if not base_path.is_absolute():
            base_path = path.parent / base_path
        base = _load_file(base_path, origins, files, depth + 1)
    return _merge(base, data, str(path), origins)


def _env_overrides(env: Mapping[str, str], origins: dict[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for name, raw in sorted(env.items()):
        if not name.startswith(OVERRIDE_PREFIX):
            continue
        parts = [part.lower() for part in name[len(OVERRIDE_PREFIX):].split("__") if part]
        if not parts:
            continue
        if _is_text_key(parts):  # a token "123456" or "null" is that text, not a number or "unset"
            value: Any = raw
        else:
            try:
                value = yaml.safe_load(raw) if raw != "" else ""
            except yaml.YAMLError:
                value = raw
        node = overrides
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another override")
        node[parts[-1]] = value
        origins[".".join(parts)] = f"environment variable {name}"
    return overrides


def _is_text_key(parts: list[str]) -> bool:
    """Whether the schema types this dotted key as a string (``str`` or ``str | None``)."""
    annotation: Any = AppConfig
    for part in parts:
        fields = getattr(annotation, "model_fields", None)
        if not fields or part not in fields:
            return False
        annotation = fields[part].annotation
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return set(get_args(annotation)) == {str, type(None)}
    return False


def _describe(error: ValidationError, origins: Mapping[str, str]) -> str:
    lines = []
    for item in error.errors():
        dotted = ".".join(str(part) for part in item["loc"])
        origin = _origin_of(dotted, origins)
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        lines.append(f"  {origin}: {dotted}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def _origin_of(dotted: str, origins: Mapping[str, str]) -> str:
    parts = dotted.split(".")
    while parts:
        origin = origins.get(".".join(parts))
        if origin:
            return origin
        parts.pop()
    return "defaults"


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Build the effective config.

    ``path`` wins; else ``$KITT_STT_CONFIG``; else built-in defaults.  ``KITT_STT__SECTION__KEY``
    variables override single keys last (values are parsed as YAML scalars).
    """
    env = os.environ if env is None else env
    origins: dict[str, str] = {}
    files: list[Path] = []
    chosen = path if path is not None else env.get(CONFIG_ENV) or None
    data: dict[str, Any] = {}
    if chosen is not None:
        data = _load_file(Path(chosen), origins, files)
    data = _merge(data, _env_overrides(env, origins), "environment", {})
    try:
        config = AppConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origins)) from None
    return LoadedConfig(config=config, files=files, origins=origins)
