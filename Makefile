# Set-up is part of every target: a fresh machine needs only Python 3.10+ and the package registry.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: serve test lint typecheck unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet 'torch==2.13.0'  # CPU build on these machines; elsewhere see docs/models.md
	$(PY) -m pip install --quiet -e '.[dev,convert]'
	touch $(STAMP)

## Run the service on the embedded default model (built on first start), on 127.0.0.1:8000.
serve: $(STAMP)
	$(VENV)/bin/kitt-stt serve --config config.yaml

## Lint, type-check and run the whole test suite (real servers on loopback ports).
test: lint typecheck
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check kitt_stt tests utils

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
