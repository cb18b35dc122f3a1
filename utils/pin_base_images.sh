#!/usr/bin/env bash
# Re-pin the base images of Dockerfile and Dockerfile.orin to the digest each tag points to now.
#
# Every FROM names `image:tag@sha256:<digest>`: the tag says what it is, the digest is what is
# built (a tag moves; a digest does not). This asks the registry for the tag's current digest (the
# multi-platform index, so the same pin builds on amd64 and arm64) and rewrites the references;
# the Jetson base's digest lives in `ARG L4T_JETPACK_DIGEST=` (Dockerfile.orin). Review the diff,
# rebuild, run the images' smoke tests, commit. Needs docker buildx and access to the registries
# (Docker Hub, nvcr.io). Usage: utils/pin_base_images.sh [--check]  (--check: report, change nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
check=${1:-}
files=(Dockerfile Dockerfile.orin)
if ! docker buildx version >/dev/null 2>&1; then
    echo "pin_base_images.sh: needs docker buildx (and access to Docker Hub and nvcr.io); nothing changed" >&2
    exit 2
fi
status=0

digest_of() {  # the index digest a tag points to now
    docker buildx imagetools inspect "$1" --format '{{json .Manifest}}' \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["digest"])'
}

update() {  # update <old text> <new text>
    if [ "$1" = "$2" ]; then return; fi
    echo "  $1 -> $2"
    if [ "$check" = --check ]; then status=1; else sed -i "s|$1|$2|g" "${files[@]}"; fi
}

for ref in $(grep -ohE '[a-z0-9.-]+(/[a-z0-9._-]+)*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}' "${files[@]}" | sort -u); do
    tag=${ref%@*}
    echo "$tag"
    new=$(digest_of "$tag")
    update "$ref" "$tag@$new"
done

l4t=$(grep -oE 'FROM [^ ]*l4t-jetpack:[A-Za-z0-9._-]+@' Dockerfile.orin | head -1 | sed 's/^FROM //; s/@$//')
old=$(grep -E '^ARG L4T_JETPACK_DIGEST=' Dockerfile.orin)
echo "$l4t"
new=$(digest_of "$l4t")
update "$old" "ARG L4T_JETPACK_DIGEST=$new"
exit $status
