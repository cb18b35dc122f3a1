#!/usr/bin/env bash
# GPU acceptance run (docs/deployment-gpu.md, "GPU acceptance"). Thin on purpose: it picks the
# Python to run in (and to install the GPU build into) and hands over to acceptance.py.
#   PYTHON=/path/to/venv/bin/python utils/gpu/acceptance.sh [--skip-install] [--model DIR] ...
# Default Python: $PYTHON, else the active virtual environment, else .venv, else python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ]; then PYTHON="$VIRTUAL_ENV/bin/python"
  elif [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python
  else PYTHON=python3
  fi
fi
exec "$PYTHON" utils/gpu/acceptance.py "$@"
