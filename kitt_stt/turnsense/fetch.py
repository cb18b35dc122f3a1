"""Fetch Smart Turn v3.2 out of the pinned ``pipecat-ai`` wheel on PyPI.

No other registry package ships the model (the smart-turn plugins download it from a model
hub at run time), so we ``pip download`` the wheel without installing it, take the one member
we need, and check its sha256 against the value recorded here.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from pathlib import Path

from kitt_stt.models.pypi import FetchError, pip_download

PACKAGE = "pipecat-ai==1.14.0"
MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SIZE = 8_679_182
LICENSE_MEMBER = "pipecat_ai-1.14.0.dist-info/licenses/LICENSE"
NOTICE = (
    "smart-turn-v3.2-cpu.onnx: Smart Turn v3.2 by Daily (BSD 2-Clause), taken unmodified from the\n"
    f"{PACKAGE} wheel on PyPI ({MEMBER}). LICENSE is that wheel's licence file.\n"
)


def fetch_turnsense(out_dir: Path) -> dict[str, str]:
    """Download the wheel with pip (its progress shows), verify and extract the model."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kitt-turnsense-") as download_dir:
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
    model_name = Path(MEMBER).name
    (out_dir / model_name).write_bytes(payload)
    (out_dir / "LICENSE").write_bytes(licence)
    (out_dir / "NOTICE").write_text(NOTICE)
    return {
        model_name: digest,
        "LICENSE": hashlib.sha256(licence).hexdigest(),
        "NOTICE": hashlib.sha256(NOTICE.encode()).hexdigest(),
    }
