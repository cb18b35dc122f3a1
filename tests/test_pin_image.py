"""utils/pin_image.py: an overlay's image pinned by digest, as kustomize renders it (issue 37).

Run on a copy of deployment/ (the script edits kustomization.yaml in place) with --digest, since
no image is built here; what docker would answer is the one part not exercised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_deployment_k8s import REPO, containers, kustomize, pod_owners

SCRIPT = REPO / "utils" / "pin_image.py"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _pin(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path} if path is not None else None
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "deployment", tmp_path / "deployment")
    return tmp_path / "deployment"


def _images(directory: Path) -> set[str]:
    return {c["image"] for owner in pod_owners(kustomize(directory))
            for c in containers(owner["spec"]["template"]["spec"])}


@pytest.mark.parametrize("overlay,tag", [("rtx4090", "0.6.1-gpu"), ("orin", "0.6.1-orin")])
def test_every_container_runs_the_pinned_digest(tree: Path, overlay: str, tag: str) -> None:
    directory = tree / "overlays" / overlay
    before = (directory / "kustomization.yaml").read_text()
    result = _pin(str(directory), f"registry.example.com/cars/kitt-stt:{tag}", "--digest", DIGEST)
    assert result.returncode == 0, result.stderr
    assert _images(directory) == {f"registry.example.com/cars/kitt-stt:{tag}@{DIGEST}"}
    after = (directory / "kustomization.yaml").read_text()
    assert [line for line in before.splitlines() if line.lstrip().startswith("#")] == \
        [line for line in after.splitlines() if line.lstrip().startswith("#")], "comments are kept"
    again = _pin(str(directory), f"registry.example.com/cars/kitt-stt:{tag}", "--digest", "sha256:" + "f" * 64)
    assert again.returncode == 0, again.stderr
    assert _images(directory) == {f"registry.example.com/cars/kitt-stt:{tag}@sha256:{'f' * 64}"}, "re-pinned"


def test_a_site_overlay_without_images_gets_the_entry(tree: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(tree / "overlays" / "rtx4090", site)]}))
    result = _pin(str(site), "registry.example.com/kitt-stt:0.6.1-gpu", "--digest", DIGEST)
    assert result.returncode == 0, result.stderr
    assert _images(site) == {f"registry.example.com/kitt-stt:0.6.1-gpu@{DIGEST}"}


@pytest.mark.parametrize("args,message", [
    (["registry.example.com/kitt-stt", "--digest", DIGEST], "expected REGISTRY/kitt-stt:TAG"),
    (["registry.example.com/kitt-stt:0.6.1-gpu", "--digest", "sha256:abc"], "not a sha256:<64 hex> digest"),
    (["registry.example.com/kitt-stt:0.6.1-gpu"], "docker not found: pass the digest with --digest"),
])
def test_what_cannot_be_pinned_is_refused_and_the_file_is_untouched(tree: Path, args: list[str], message: str) -> None:
    directory = tree / "overlays" / "rtx4090"
    before = (directory / "kustomization.yaml").read_text()
    result = _pin(str(directory), *args, path="/nonexistent")  # no docker on PATH
    assert result.returncode == 1 and message in result.stderr
    assert (directory / "kustomization.yaml").read_text() == before
