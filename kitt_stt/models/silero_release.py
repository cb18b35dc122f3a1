"""Fetch Silero VAD v6 out of the pinned ``silero-vad`` wheel on PyPI.

The wheel ships the ONNX model as package data; the package itself wants torch, so it is
downloaded without being installed, and the one member we run (on our own onnxruntime) is taken
out and checked against the sha256 recorded here.
"""

from __future__ import annotations

from pathlib import Path

from kitt_stt.audio.silero import MODEL_FILE
from kitt_stt.models.pypi import WheelMember

PACKAGE = "silero-vad==6.2.3"
MEMBER = f"silero_vad/data/{MODEL_FILE}"
SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
SIZE = 2_327_524
LICENSE_MEMBER = "silero_vad-6.2.3.dist-info/licenses/LICENSE"
NOTICE = (
    f"{MODEL_FILE}: Silero VAD v6 by the Silero Team (MIT), taken unmodified from the {PACKAGE}\n"
    f"wheel on PyPI ({MEMBER}). LICENSE is that wheel's licence file.\n"
)
SILERO_VAD = WheelMember(PACKAGE, MEMBER, SHA256, SIZE, LICENSE_MEMBER, NOTICE)


def fetch_silero_vad(out_dir: Path) -> dict[str, str]:
    """Download the wheel with pip, verify and extract the model."""
    return SILERO_VAD.fetch(out_dir)
