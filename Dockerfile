# kitt-stt service image (x86-64). CPU by default; for the RTX 4090 deployment build with
#   docker build --build-arg BASE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 --build-arg EXTRAS=gpu .
# (the GPU base must provide python3/pip; see docs/deployment.md).
ARG BASE=python:3.11-slim

# Stage 1: install the embedded default models (whisper-base is converted with CPU torch, which
# the service image does not need) into a cache that the service image copies.
FROM python:3.11-slim AS models
WORKDIR /app
COPY pyproject.toml README.md config.yaml ./
COPY kitt_stt ./kitt_stt
RUN python3 -m pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cpu \
 && python3 -m pip install --no-cache-dir ".[convert]" \
 && KITT_STT__MODELS__CACHE_DIR=/models kitt-stt models prepare --config /app/config.yaml

FROM ${BASE}

ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KITT_STT__SERVER__HOST=0.0.0.0 \
    KITT_STT__MODELS__CACHE_DIR=/var/cache/kitt-stt/models

WORKDIR /app
COPY pyproject.toml README.md ./
COPY kitt_stt ./kitt_stt
# onnxruntime and onnxruntime-gpu install the same module: with the gpu extra keep only the GPU build.
RUN python3 -m pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
 && if echo "$EXTRAS" | grep -q gpu; then \
      python3 -m pip uninstall -y onnxruntime \
      && python3 -m pip install --no-cache-dir --force-reinstall --no-deps "onnxruntime-gpu>=1.18"; \
    fi \
 && useradd --system --uid 10001 kitt \
 && mkdir -p /var/cache/kitt-stt/models && chown -R kitt /var/cache/kitt-stt
COPY config.yaml config-k8s.yaml config-k3s-orin.yaml ./

# The embedded default models, so a pod starts without fetching or writing them.
COPY --from=models --chown=kitt /models /var/cache/kitt-stt/models
USER kitt

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=2s CMD python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz').status==200 else 1)"
STOPSIGNAL SIGTERM
CMD ["kitt-stt", "serve", "--config", "/app/config.yaml"]
