"""The run's results: one JSON line per finished step or cell, appended and flushed at once.

A run cut off by its time slot keeps every line written before the cut, and ``summary.py``
builds its table from whatever lines exist; a half-written last line is skipped, not fatal.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"


def append(out: Path, kind: str, **fields: Any) -> dict[str, Any]:
    """Write one line (``kind``: preflight, step, cell, placement, agreement, ...) durably."""
    line = {"kind": kind, "at": round(time.time(), 3), **fields}
    out.mkdir(parents=True, exist_ok=True)
    with (out / RESULTS).open("a") as handle:
        handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return line


def read(out: Path) -> list[dict[str, Any]]:
    path = out / RESULTS if out.is_dir() else out
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # the line a cut interrupted
    return lines
