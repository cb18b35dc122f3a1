"""``StrEnum`` on every Python the service supports.

``enum.StrEnum`` is new in 3.11; JetPack 6 (the Jetson Orin target) ships Python 3.10.  On 3.10
a ``str`` mix-in with the same ``str()`` behaviour stands in, so members print, format and
compare as their values everywhere (logs, wire frames, metrics labels).
"""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


__all__ = ["StrEnum"]
