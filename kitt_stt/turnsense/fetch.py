"""Fetch Smart Turn v3.2 out of the pinned ``pipecat-ai`` wheel on PyPI.

No other registry package ships the model (the smart-turn plugins download it from a model
hub at run time), so we ``pip download`` the wheel without installing it, take the one member
we need, and check its sha256 against the value recorded here.
"""

from __future__ import annotations

from pathlib import Path

from kitt_stt.models.pypi import WheelMember

PACKAGE = "pipecat-ai==1.14.0"
MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SIZE = 8_679_182
LICENSE_MEMBER = "pipecat_ai-1.14.0.dist-info/licenses/LICENSE"
NOTICE = (
    "smart-turn-v3.2-cpu.onnx: Smart Turn v3.2 by Daily (BSD 2-Clause), taken unmodified from the\n"
    f"{PACKAGE} wheel on PyPI ({MEMBER}). LICENSE is that wheel's licence file.\n"
)
TURNSENSE = WheelMember(PACKAGE, MEMBER, SHA256, SIZE, LICENSE_MEMBER, NOTICE)


def fetch_turnsense(out_dir: Path) -> dict[str, str]:
    """Download the wheel with pip, verify and extract the model."""
    return TURNSENSE.fetch(out_dir)
