#!/usr/bin/env python3
"""Pin a kustomization's kitt-stt image by digest, from the image as built and pushed.

    python3 utils/pin_image.py deployment/overlays/rtx4090 registry.example.com/kitt-stt:0.5.0-gpu
    python3 utils/pin_image.py site/ registry.example.com/kitt-stt:0.5.0-orin --digest sha256:<64 hex>

Why: the overlays name a tag (0.5.0-gpu, 0.5.0-orin) with imagePullPolicy IfNotPresent, and a tag
can be pushed again, so two nodes may run two builds under one name. With the digest in the
kustomization's ``images:`` entry every node runs the same bytes (kustomize renders
``name:tag@sha256:...``; the tag stays for the reader, the runtime pulls by digest).

The digest is the registry's manifest digest of IMAGE: ``docker buildx imagetools inspect`` (the
multi-platform index digest where there is one), else ``docker image inspect``'s RepoDigests,
else ``--digest`` (from CI, or ``k3s ctr images ls`` on a device the image was imported into).
The entry for ``kitt-stt`` in the kustomization's ``images:`` list is rewritten in place (or
added); the rest of the file, comments included, is left as it is. Standard library only, so it
runs without the project's virtual environment.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

IMAGE_NAME = "kitt-stt"  # the name the pod templates use (deployment/base/server-pod/pod.yaml)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: registry/path/name:tag (no digest: that is what this script finds).
REFERENCE = re.compile(r"(?P<name>[a-z0-9][a-z0-9._/:-]*?[a-z0-9]):(?P<tag>[\w][\w.-]{0,127})")


class PinError(Exception):
    """Said to the operator as is, with a non-zero exit."""


def resolve_digest(image: str) -> str:
    """The registry manifest digest of ``image``, from docker; PinError when docker cannot tell."""
    docker = shutil.which("docker")
    if docker is None:
        raise PinError("docker not found: pass the digest with --digest sha256:<digest>")
    inspect = subprocess.run([docker, "buildx", "imagetools", "inspect", image, "--format", "{{json .Manifest}}"],
                             capture_output=True, text=True, timeout=120)
    if inspect.returncode == 0:
        digest = json.loads(inspect.stdout).get("digest", "")
        if DIGEST.fullmatch(digest):
            return digest
    local = subprocess.run([docker, "image", "inspect", image, "--format", "{{json .RepoDigests}}"],
                           capture_output=True, text=True, timeout=60)
    if local.returncode == 0:
        name = image.rsplit(":", 1)[0]
        for repo_digest in json.loads(local.stdout) or []:
            repo, _, digest = repo_digest.partition("@")
            if repo == name and DIGEST.fullmatch(digest):
                return digest
    raise PinError(f"{image}: no registry digest (push the image first, or pass --digest sha256:<digest>): "
                   f"{inspect.stderr.strip() or local.stderr.strip() or 'not pushed'}")


def _entry(name: str, tag: str, digest: str) -> list[str]:
    return [f"  - name: {IMAGE_NAME}\n", f"    newName: {name}\n", f"    newTag: {tag}\n", f"    digest: {digest}\n"]


def pin(text: str, name: str, tag: str, digest: str) -> str:
    """``text`` (a kustomization.yaml) with its kitt-stt image entry set to name:tag@digest."""
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if re.fullmatch(r"images:\s*(#.*)?\n?", line))
    except StopIteration:
        tail = "" if not lines or lines[-1].endswith("\n") else "\n"
        return text + tail + "\nimages:\n" + "".join(_entry(name, tag, digest))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()),
               len(lines))
    block = lines[start + 1:end]
    items = [i for i, line in enumerate(block) if re.match(r"\s*- ", line)]
    for n, first in enumerate(items):
        last = items[n + 1] if n + 1 < len(items) else len(block)
        if re.fullmatch(rf"\s*- name: {re.escape(IMAGE_NAME)}\s*", block[first]):
            while last > first + 1 and (block[last - 1].lstrip().startswith("#") or not block[last - 1].strip()):
                last -= 1  # comments that introduce the next entry stay with it
            block[first:last] = _entry(name, tag, digest)
            break
    else:
        block = [*block, *_entry(name, tag, digest)]
    return "".join([*lines[:start + 1], *block, *lines[end:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kustomization", type=Path, help="the kustomization directory (an overlay or your site's)")
    parser.add_argument("image", help="the pushed image, REGISTRY/kitt-stt:TAG")
    parser.add_argument("--digest", help="sha256:<64 hex>; without it docker is asked")
    args = parser.parse_args(argv)
    try:
        match = REFERENCE.fullmatch(args.image)
        if match is None or "@" in args.image:
            raise PinError(f"{args.image}: expected REGISTRY/kitt-stt:TAG (a tag, no digest)")
        digest = args.digest or resolve_digest(args.image)
        if not DIGEST.fullmatch(digest):
            raise PinError(f"{digest}: not a sha256:<64 hex> digest")
        path = args.kustomization / "kustomization.yaml"
        if not path.is_file():
            raise PinError(f"{path}: no such file")
        path.write_text(pin(path.read_text(), match["name"], match["tag"], digest))
    except (PinError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        print(f"pin_image: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: {IMAGE_NAME} -> {match['name']}:{match['tag']}@{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
