"""Can this process write a cache directory, or create it? Checked with ``os.access`` as the user
the process runs as (the images run as uid 10001), which also sees read-only mounts."""

from __future__ import annotations

import os
from pathlib import Path


def writable(path: Path) -> tuple[bool, str]:
    """(usable, how): an existing writable directory, or one whose nearest existing parent is."""
    if path.exists():
        if not path.is_dir():
            return False, f"{path} exists and is not a directory"
        if os.access(path, os.W_OK | os.X_OK):
            return True, f"writable: {path}"
        return False, f"not writable by uid {os.getuid()}: {path}"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return True, f"can be created: {path}"
    return False, f"cannot be created by uid {os.getuid()} ({parent} is not writable): {path}"
