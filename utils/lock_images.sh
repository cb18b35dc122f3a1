#!/usr/bin/env bash
# Regenerate the hashed lock files of the images (deployment/locks/*.txt): `make locks`.
#
# One lock per image and architecture, resolved by uv for the image's Python and glibc (not this
# machine's), every wheel with its sha256 (--generate-hashes). The Dockerfiles install them with
# `pip install --require-hashes --no-deps`, so a rebuild gets exactly these files or stops.
# Versions that were chosen on purpose (and why) stay in deployment/pins/*.txt, used here as
# constraints; the lock adds everything else they pull in. Run it after changing pyproject.toml's
# dependencies or a pins file, review the diff, commit both. Needs uv (pip install uv) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
PINS=deployment/pins
LOCKS=deployment/locks

compile() {  # compile <output> <python version> <platform> <inputs and options...>
    local output=$1 python=$2 platform=$3
    shift 3
    # --only-binary: the images install wheels only (--only-binary=:all: there too), so the lock must
    # resolve to versions that have a wheel for the image's platform; nothing is built from source.
    "$UV" pip compile --quiet --generate-hashes --only-binary :all: --index-url https://pypi.org/simple \
        --custom-compile-command "make locks" --python-version "$python" --python-platform "$platform" \
        --output-file "$LOCKS/$output" "$@"
}

# CPU image (Dockerfile, target cpu) and the models builder stage of both Dockerfiles (which also
# converts the end-of-turn text model: gguf and tokenizers are runtime dependencies, so this lock
# has them): python:3.11-slim-bookworm (glibc 2.36), one lock for both. Resolved for x86-64; the
# builder stage also runs on arm64 build machines, so the same resolution for aarch64 must give
# the same file (the hashes cover every wheel of each version), or this script stops.
compile cpu.txt 3.11 x86_64-manylinux_2_36 pyproject.toml -c "$PINS/cpu.txt"
# Seeded with cpu.txt: uv keeps an output file's versions where they still resolve, so both
# resolutions start from the same preferences instead of the check taking the newest releases.
cp "$LOCKS/cpu.txt" "$LOCKS/cpu-aarch64.check"
compile cpu-aarch64.check 3.11 aarch64-manylinux_2_36 pyproject.toml -c "$PINS/cpu.txt"
if ! cmp -s "$LOCKS/cpu.txt" "$LOCKS/cpu-aarch64.check"; then
    diff "$LOCKS/cpu.txt" "$LOCKS/cpu-aarch64.check" >&2 || true
    rm -f "$LOCKS/cpu-aarch64.check"
    echo "lock_images.sh: the CPU image resolves differently on aarch64; give it a lock of its own" >&2
    exit 1
fi
rm -f "$LOCKS/cpu-aarch64.check"
# x86-64 GPU image (Dockerfile, target gpu; RTX 4090 nodes). tensorrt-cu12-libs is not on PyPI
# (only a stub of that name): the Dockerfile takes it from NVIDIA's index, pinned in its pins file.
compile gpu-x86_64.txt 3.11 x86_64-manylinux_2_36 pyproject.toml "$LOCKS/gpu-x86_64.in" \
    -c "$PINS/cpu.txt" -c "$PINS/gpu-x86_64.txt" --no-emit-package onnxruntime
# Jetson Orin image (Dockerfile.orin): Ubuntu 22.04 (glibc 2.35), Python 3.10, aarch64.
compile orin-aarch64.txt 3.10 aarch64-manylinux_2_35 pyproject.toml "$LOCKS/orin-aarch64.in" \
    -c "$PINS/orin.txt" --no-emit-package onnxruntime
# kitt-stt's build backend (the wheel stage of both Dockerfiles; pure Python).
compile build.txt 3.11 x86_64-manylinux_2_36 "$LOCKS/build.in"
