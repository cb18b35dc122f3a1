#!/usr/bin/env bash
# Regenerate the development environment's hashed locks (deployment/locks/dev-*.txt, serve-*.txt):
# part of `make locks`.
#
# `make serve` and `make test` install from these with `pip install --require-hashes --no-deps`, so
# every machine gets the same files, and a new release of a dependency reaches the suite only when
# someone moves RESOLVED_AS_OF forward, runs `make locks` and commits the diff (docs/testing.md).
# uv's --exclude-newer resolves as the registry stood at that instant, so the same inputs and date
# give the same files byte for byte. `make test-latest` runs the suite on what the ranges allow today.
#   dev-py311.txt   `make test`'s .venv: runtime + convert (torch, CPU build) + dev + frameworks
#   dev-py310.txt   `make test`'s .venv310 (JetPack 6's Python): the same without convert, resolved on
#                   its own (several dependencies dropped 3.10 in releases the 3.11 lock takes)
#   serve-py311.txt `make serve`'s .venv: runtime + convert only, at the dev lock's versions
# Needs uv (make locks installs it) and PyPI; torch's CPU build from a find-links folder
# (FIND_LINKS, default /opt/wheels) or PyTorch's CPU index (TORCH_INDEX).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
LOCKS=deployment/locks
# The instant the registry is read as of: move it forward on purpose (docs/testing.md, "The locks").
RESOLVED_AS_OF=2026-12-03T00:00:00Z
FIND_LINKS=${FIND_LINKS:-/opt/wheels}
TORCH_INDEX=${TORCH_INDEX:-}

sources=(--index-url https://pypi.org/simple)
[ -d "$FIND_LINKS" ] && sources+=(--find-links "$FIND_LINKS")
[ -n "$TORCH_INDEX" ] && sources+=(--extra-index-url "$TORCH_INDEX" --index-strategy unsafe-best-match)

compile() {  # compile <output> <python version> <inputs and options...>
    local output=$1 python=$2
    shift 2
    # The header names the date, which `make test` prints; the machine class is CI's and the
    # developers' (Linux x86-64, glibc 2.36); build.txt's setuptools and wheel are installed first.
    "$UV" pip compile --quiet --generate-hashes "${sources[@]}" --exclude-newer "$RESOLVED_AS_OF" \
        --custom-compile-command "make locks  # resolved as of $RESOLVED_AS_OF" \
        --python-version "$python" --python-platform x86_64-manylinux_2_36 \
        -c "$LOCKS/build.txt" --output-file "$LOCKS/$output" "$@"
}

compile dev-py311.txt 3.11 pyproject.toml "$LOCKS/dev.in" \
    --extra convert --extra dev --extra pipecat --extra livekit
compile dev-py310.txt 3.10 pyproject.toml \
    --extra dev --extra pipecat --extra livekit
compile serve-py311.txt 3.11 pyproject.toml "$LOCKS/dev.in" --extra convert -c "$LOCKS/dev-py311.txt"
