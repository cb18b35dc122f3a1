"""Every module of the package imports on the Python running the suite, and every Python file of
the repository compiles there: the cheapest check that a 3.11-only API or syntax has not crept in
(``make test`` runs this file on 3.10 too, see docs/testing.md "Which tests run on 3.10").

A module may only fail for a missing optional extra (pipecat-ai has no 3.10 release), and only
with that package's name; anything else is a failure."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import kitt_stt

pytestmark = pytest.mark.py310

REPO = Path(__file__).resolve().parent.parent
#: Top-level packages of the optional extras (pyproject.toml) a module may need and an install lack
#: (loguru comes with pipecat-ai, and the pipecat adapter logs through it as pipecat does).
OPTIONAL = {"pipecat", "loguru", "livekit", "torch"}


def package_modules() -> list[str]:
    found = [info.name for info in pkgutil.walk_packages(kitt_stt.__path__, "kitt_stt.")]
    return sorted(name for name in found if not name.endswith("__main__"))  # __main__ runs the CLI


def test_the_package_has_modules_to_import() -> None:
    names = package_modules()
    assert len(names) > 50 and "kitt_stt.server.app" in names and "kitt_stt.pipeline.seat" in names


@pytest.mark.parametrize("name", package_modules())
def test_every_module_imports(name: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in OPTIONAL:
            raise
        pytest.skip(f"needs the optional package {missing!r}, not installed on Python {sys.version.split()[0]}")


def test_every_python_file_compiles() -> None:
    files = [path for folder in ("kitt_stt", "tests", "utils", "examples") for path in (REPO / folder).rglob("*.py")
             if "node_modules" not in path.parts]
    assert len(files) > 150
    for path in files:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
