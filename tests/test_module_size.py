"""Each module fits on a screen or two (issue 21): a module past the limit is where unrelated
concerns start to accrete, as the seat pipeline did before its split. The seat itself stays thin
wiring: new per-seat behaviour belongs in its own room (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kitt_stt"
MAX_LINES = 360
MAX_SEAT_LINES = 210


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_in_the_package_is_over_the_limit() -> None:
    modules = [path for path in PACKAGE.rglob("*.py") if "node_modules" not in path.parts]
    assert len(modules) > 100  # the walk found the package
    too_long = {str(path.relative_to(PACKAGE)): _lines(path) for path in modules if _lines(path) > MAX_LINES}
    assert not too_long, f"split these by concern (limit {MAX_LINES} lines): {too_long}"


@pytest.mark.parametrize("module", ["pipeline/seat.py"])
def test_the_seat_stays_thin_wiring(module: str) -> None:
    assert _lines(PACKAGE / module) <= MAX_SEAT_LINES
