"""Fetch Silero VAD v6 out of the pinned ``silero-vad`` wheel on PyPI.

The wheel ships the ONNX model as package data; the package itself wants torch, so it is
downloaded without being installed, and the one member we run (on our own onnxruntime) is taken
out and checked against the sha256 recorded here.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from pathlib import Path

from kitt_stt.audio.silero import MODEL_FILE
from kitt_stt.models.pypi import FetchError, pip_download

PACKAGE = "silero-vad==6.2.3"
MEMBER = f"silero_vad/data/{MODEL_FILE}"
SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
SIZE = 2_327_524
LICENSE_MEMBER = "silero_vad-6.2.3.dist-info/licenses/LICENSE"
NOTICE = (
    f"{MODEL_FILE}: Silero VAD v6 by the Silero Team (MIT), taken unmodified from the {PACKAGE}\n"
    f"wheel on PyPI ({MEMBER}). LICENSE is that wheel's licence file.\n"
)


def fetch_silero_vad(out_dir: Path) -> dict[str, str]:
    """Download the wheel with pip (its progress shows), verify and extract the model."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kitt-silero-") as download_dir:
        wheel_path = pip_download(PACKAGE, Path(download_dir))
        try:
            with zipfile.ZipFile(wheel_path) as wheel:
                payload = wheel.read(MEMBER)
                licence = wheel.read(LICENSE_MEMBER)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise FetchError(f"{wheel_path.name}: cannot read {MEMBER}: {exc}") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != SHA256 or len(payload) != SIZE:
        raise FetchError(f"{MEMBER}: sha256 {digest} ({len(payload)} bytes), expected {SHA256} ({SIZE} bytes)")
    (out_dir / MODEL_FILE).write_bytes(payload)
    (out_dir / "LICENSE").write_bytes(licence)
    (out_dir / "NOTICE").write_text(NOTICE)
    return {
        MODEL_FILE: digest,
        "LICENSE": hashlib.sha256(licence).hexdigest(),
        "NOTICE": hashlib.sha256(NOTICE.encode()).hexdigest(),
    }
