# Set-up is part of every target: a fresh machine needs only Python 3.10+ and the package registry.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The second Python the suite runs on: 3.10 is JetPack 6's (Jetson Orin). Found on PATH or in pyenv.
PYTHON310 ?= $(shell command -v python3.10 >/dev/null 2>&1 && python3.10 -c '' 2>/dev/null && echo python3.10 \
               || ls -d $$(pyenv root 2>/dev/null)/versions/3.10*/bin/python3.10 2>/dev/null | tail -1)
VENV310 ?= .venv310
STAMP310 := $(VENV310)/.installed-stamp
# Models fetched and converted once, shared by the runs on both Pythons (torch, which converts
# whisper-base, has no CPU wheel on PyPI for 3.10).
TEST_MODELS := $(CURDIR)/.cache/test-models

.PHONY: serve test test-py310 lint typecheck unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet 'torch==2.13.0'  # CPU build on these machines; elsewhere see docs/models.md
	$(PY) -m pip install --quiet -e '.[dev,convert]'
	touch $(STAMP)

$(STAMP310): pyproject.toml
	@test -n "$(PYTHON310)" || { echo "make: Python 3.10 not found (install it, or set PYTHON310=/path/to/python3.10)"; exit 1; }
	$(PYTHON310) -m venv $(VENV310)
	$(VENV310)/bin/python -m pip install --quiet --upgrade pip
	$(VENV310)/bin/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP310)

## Run the service on the embedded default model (built on first start), on 127.0.0.1:8000.
serve: $(STAMP)
	$(VENV)/bin/kitt-stt serve --config config.yaml

## Lint, type-check and run the whole test suite on Python 3.11+ and on 3.10 (real servers on loopback ports).
test: lint typecheck
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) $(PY) -m pytest
	$(MAKE) --no-print-directory test-py310

test-py310: $(STAMP310)
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) $(VENV310)/bin/python -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check kitt_stt tests utils

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(VENV310) .cache/test-models .pytest_cache .mypy_cache .ruff_cache
