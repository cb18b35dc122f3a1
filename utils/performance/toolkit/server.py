"""A real ``kitt-stt serve`` for a bench: the test suite's server start (``tests.helpers``) on the
user's model cache, in a throwaway directory, with settings from ``--set KEY.PATH=YAML``."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import RunningServer, run_server


def parse_set(item: str) -> dict[str, Any]:
    """``server.max_pending_decodes=4`` -> ``{"server": {"max_pending_decodes": 4}}`` (value as YAML),
    so settings the server may or may not know yet can be tried without editing a tool."""
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise argparse.ArgumentTypeError(f"expected KEY.PATH=VALUE, got {item!r}")
    value: Any = yaml.safe_load(raw)
    for part in reversed(parts):
        value = {part: value}
    return value


@contextmanager
def bench_server(overrides: dict[str, Any], prefix: str) -> Iterator[RunningServer]:
    """A server on ``tests.helpers.TEST_CONFIG`` + ``overrides``, with models from the user's
    cache (``kitt-stt models pull`` fills it; the tone model is built there on first use), its
    config and log in a directory removed afterwards."""
    from kitt_stt.models.registry import default_cache_dir

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, \
            run_server(Path(tmp), default_cache_dir(), overrides) as server:
        yield server
