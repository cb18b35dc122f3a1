"""What `make test-latest` runs on that the development lock does not: one line per package whose
version differs (docs/testing.md, "The locks"), so a failure there points at the release to read."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PIN = re.compile(r"(?m)^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(text: str) -> dict[str, str]:
    """{normalised name: version} of a lock or a `pip freeze`."""
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in PIN.findall(text)}


def drift(locked: dict[str, str], latest: dict[str, str]) -> list[str]:
    return [f"{name} {locked.get(name, '(new)')} -> {version}"
            for name, version in sorted(latest.items()) if locked.get(name) != version]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: lock_drift.py LOCK FREEZE", file=sys.stderr)
        return 2
    lines = drift(pins(Path(argv[0]).read_text()), pins(Path(argv[1]).read_text()))
    print("\n".join(f"  {line}" for line in lines) or "  (none: the lock is current)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
