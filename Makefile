# Set-up is part of every target: a fresh machine needs only Python 3.10+ and the package registry.
# The locks below are resolved for CPython 3.11 (and 3.10) on Linux x86-64: python3.11 when on PATH.
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && python3.11 -c '' 2>/dev/null && echo python3.11 || echo python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Every install comes from a hashed lock (deployment/locks/, `make locks`; docs/testing.md "The locks"):
# `make serve` installs the runtime and the Whisper converter only, `make test` adds the test tools and
# the framework extras on top, at the same versions.
LOCKS := deployment/locks
SERVE_LOCK := $(LOCKS)/serve-py311.txt
DEV_LOCK := $(LOCKS)/dev-py311.txt
DEV_LOCK310 := $(LOCKS)/dev-py310.txt
SERVE_STAMP := $(VENV)/.serve-stamp
STAMP := $(VENV)/.test-stamp
# pip from a lock: setuptools and wheel first (build.txt: they build the one sdist in the locks and
# kitt-stt itself, with no unhashed build isolation), then the lock, then kitt-stt (editable, no deps).
define install_locked  # $(1): the venv's python, $(2): the lock
	$(1) -c 'import sys; want = "$(2)".rsplit("-py", 1)[1][:3]; have = "%d%d" % sys.version_info[:2]; \
	  sys.exit(0 if have == want else "make: $(2) is for Python 3.%s, this is %s.%s: remove %s and set PYTHON=python3.%s" \
	  % (want[1:], have[0], have[1:], sys.prefix, want[1:]))'
	$(1) -m pip install --quiet --require-hashes --no-deps -r $(LOCKS)/build.txt
	$(1) -m pip install --quiet --require-hashes --no-deps --no-build-isolation -r $(2)
	$(1) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(1) -m pip check
endef
# The second Python the suite runs on: 3.10 is JetPack 6's (Jetson Orin). Found on PATH or in pyenv.
PYTHON310 ?= $(shell command -v python3.10 >/dev/null 2>&1 && python3.10 -c '' 2>/dev/null && echo python3.10 \
               || ls -d $$(pyenv root 2>/dev/null)/versions/3.10*/bin/python3.10 2>/dev/null | tail -1)
VENV310 ?= .venv310
STAMP310 := $(VENV310)/.test-stamp
# Models fetched and converted once, shared by the runs on both Pythons (torch, which converts
# whisper-base, has no CPU wheel on PyPI for 3.10).
TEST_MODELS := $(CURDIR)/.cache/test-models
# The browser console's msgpack library: `npm ci` installs the version and integrity hash that
# kitt_stt/console/package-lock.json pins, from the npm registry, into the git-ignored node_modules/.
CONSOLE := kitt_stt/console
CONSOLE_LIB := $(CONSOLE)/node_modules/@msgpack/msgpack/dist.umd/msgpack.min.js
# The browser tests' Chromium: Debian's (Playwright drives it; a driver's own browser download does
# not work on these machines). Installed when missing, with a CJK font for the screenshots.
CHROMIUM ?= /usr/bin/chromium
# pytest-xdist workers for the 3.11+ pass (each starts its own session server on its own free port and
# shares the model cache, whose installs are locked); PYTEST_WORKERS=0 runs it in one process. Three on
# two cores: the suite mostly waits on the wall clock (real-time streaming, turn waits), docs/testing.md.
PYTEST_WORKERS ?= 3

.PHONY: serve console test test-py310 test-latest lint typecheck unit clean locks pin-image

$(SERVE_STAMP): $(SERVE_LOCK) pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call install_locked,$(PY),$(SERVE_LOCK))
	touch $(SERVE_STAMP)

$(STAMP): $(DEV_LOCK) pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call install_locked,$(PY),$(DEV_LOCK))
	touch $(STAMP) $(SERVE_STAMP)

$(STAMP310): $(DEV_LOCK310) pyproject.toml
	@test -n "$(PYTHON310)" || { echo "make: Python 3.10 not found (install it, or set PYTHON310=/path/to/python3.10)"; exit 1; }
	test -x $(VENV310)/bin/python || $(PYTHON310) -m venv $(VENV310)
	$(call install_locked,$(VENV310)/bin/python,$(DEV_LOCK310))
	touch $(STAMP310)

$(CONSOLE_LIB): $(CONSOLE)/package.json $(CONSOLE)/package-lock.json
	@command -v npm >/dev/null || { echo "make: npm not found: install Node.js and npm for the console's msgpack library"; exit 1; }
	npm ci --prefix $(CONSOLE) --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(CONSOLE_LIB)

$(CHROMIUM):
	@echo "make: installing Debian's chromium for the browser tests (needs root; or set CHROMIUM=/path/to/chromium)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-wqy-microhei

# A human voice from Debian for the Whisper padding test (alsa-utils' channel announcements, GPL-2),
# installed when missing like chromium; without it that one test is skipped.
ALSA_VOICES ?= /usr/share/sounds/alsa/Front_Center.wav
$(ALSA_VOICES):
	@echo "make: installing Debian's alsa-utils for its recorded voices (needs root)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends alsa-utils

## The browser console's library (docs/console.md).
console: $(CONSOLE_LIB)

## Run the service on the embedded default model (built on first start), on 127.0.0.1:8000. Without
## npm the service still starts; the console page then says what it is missing.
serve: $(SERVE_STAMP)
	@$(MAKE) --no-print-directory console || echo "make: the browser console will not work until npm installs its library"
	@$(VENV)/bin/kitt-stt config show --config config.yaml --json | $(PY) -c 'import json, sys; \
	  s = json.load(sys.stdin)["server"]; \
	  print("console: http://%s:%s/console/ (once the service is ready)" % (s["host"], s["port"]) if s["console"] else "console: off")'
	$(VENV)/bin/kitt-stt serve --config config.yaml

## Lint, type-check and run the whole test suite on Python 3.11+, then the tests that can differ by
## Python version (marker py310, docs/testing.md) on 3.10 (real servers on loopback ports).
test: lint typecheck $(CONSOLE_LIB) $(CHROMIUM) $(ALSA_VOICES)
	@echo "make: testing on $(DEV_LOCK) and $(DEV_LOCK310) ($$(grep -m1 -o 'resolved as of [^ ]*' $(DEV_LOCK)); make test-latest tries today's releases)"
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) CHROMIUM=$(CHROMIUM) $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial"
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) $(PY) -m pytest -m serial
	$(MAKE) --no-print-directory test-py310

test-py310: $(STAMP310)
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) $(VENV310)/bin/python -m pytest -m py310 -n $(PYTEST_WORKERS) --dist loadfile

## The suite on the newest releases pyproject.toml's ranges allow today (torch stays at the lock's CPU
## build), in a venv of its own: what the next `make locks` would bring. Not part of .ci/run; run it
## before moving RESOLVED_AS_OF forward (docs/testing.md, "The locks").
VENV_LATEST ?= .venv-latest
test-latest: $(CONSOLE_LIB) $(CHROMIUM)
	rm -rf $(VENV_LATEST) && $(PYTHON) -m venv $(VENV_LATEST)
	$(VENV_LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_LATEST)/bin/python -m pip install --quiet -r $(LOCKS)/dev.in
	$(VENV_LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -c $(LOCKS)/dev.in \
	  -e '.[dev,convert,pipecat,livekit]'
	$(VENV_LATEST)/bin/python -m pip freeze --exclude-editable > $(VENV_LATEST)/resolved.txt
	@echo "make: testing on today's releases ($(VENV_LATEST)/resolved.txt; differences from $(DEV_LOCK) below)"
	@$(VENV_LATEST)/bin/python utils/lock_drift.py $(DEV_LOCK) $(VENV_LATEST)/resolved.txt
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) CHROMIUM=$(CHROMIUM) $(VENV_LATEST)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial"
	KITT_STT_TEST_MODEL_CACHE=$(TEST_MODELS) $(VENV_LATEST)/bin/python -m pytest -m serial

lint: $(STAMP)
	$(VENV)/bin/ruff check kitt_stt tests utils

typecheck: $(STAMP)
	$(VENV)/bin/mypy

## Regenerate the hashed lock files (deployment/locks/): the images' (docs/deployment.md "Supply chain")
## and the development environment's (docs/testing.md "The locks")
## with uv (in a small venv of its own, not the project's), from pyproject.toml and
## deployment/pins/; needs PyPI. Review the diff and commit it.
LOCKS_VENV := .cache/locks-venv
locks:
	@test -x $(LOCKS_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCKS_VENV) && $(LOCKS_VENV)/bin/python -m pip install --quiet 'uv==0.13.9'; }
	UV=$(LOCKS_VENV)/bin/uv utils/lock_images.sh
	UV=$(LOCKS_VENV)/bin/uv utils/lock_dev.sh

## Pin an overlay's (or your site's) image by digest after pushing it (docs/deployment.md):
##   make pin-image OVERLAY=deployment/overlays/rtx4090 IMAGE=registry.example.com/kitt-stt:0.5.0-gpu
pin-image:
	$(PYTHON) utils/pin_image.py $(OVERLAY) $(IMAGE) $(if $(DIGEST),--digest $(DIGEST))

clean:
	rm -rf $(VENV) $(VENV310) $(VENV_LATEST) .cache/test-models .cache/test-artefacts $(CONSOLE)/node_modules .pytest_cache .mypy_cache .ruff_cache
