"""What every ``kitt-stt`` subcommand shares: how it fails."""

from __future__ import annotations

import sys

EXIT_USAGE = 2


def fail(message: str) -> int:
    """Print one error line and return the usage exit status (the command's result)."""
    print(f"kitt-stt: error: {message}", file=sys.stderr)
    return EXIT_USAGE
