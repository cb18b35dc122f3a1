#!/usr/bin/env bash
# GPU acceptance run (docs/deployment-gpu.md, "GPU acceptance"). Thin on purpose: it picks the
# host's Python (which is never installed into: the run installs into a private target folder)
# and hands over to acceptance.py, which needs only the standard library.
#   PYTHON=python3 utils/gpu/acceptance.sh --offline --wheels WHEELS --out OUT [--model DIR] ...
# Default Python: $PYTHON, else the active virtual environment, else .venv, else python3.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"   # no cd: relative paths in the arguments stay the caller's
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ]; then PYTHON="$VIRTUAL_ENV/bin/python"
  elif [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"
  else PYTHON=python3
  fi
fi
exec "$PYTHON" "$REPO/utils/gpu/acceptance.py" "$@"
