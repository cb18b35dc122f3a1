"""`models pull sensevoice` against a real HTTP server on loopback: checksum, resume, offline."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.config.schema import ModelsConfig
from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.download import DownloadError
from kitt_stt.models.registry import REGISTRY, install_into, verify_installed
from kitt_stt.models.sensevoice_release import DEFAULT_URL, OFFICIAL_SHA256, RELEASE, expected_sha256
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[1]


def release_archive(tone_dir: Path) -> bytes:
    """A stand-in for the official archive: same layout, the tone model inside."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as tar:
        tar.add(tone_dir / "model.onnx", arcname=f"{RELEASE}/model.int8.onnx")
        tar.add(tone_dir / "tokens.txt", arcname=f"{RELEASE}/tokens.txt")
        readme = b"test release"
        info = tarfile.TarInfo(f"{RELEASE}/test_wavs/zh.wav")
        info.size = len(readme)
        tar.addfile(info, io.BytesIO(readme))
    return buffer.getvalue()


class ArchiveServer:
    """Serves one file with Range support; can cut the first response halfway."""

    def __init__(self, payload: bytes, cut_first: bool = False) -> None:
        self.payload = payload
        self.cut_first = cut_first
        self.ranges: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                requested = self.headers.get("Range")
                outer.ranges.append(requested)
                start = int(requested.split("=")[1].split("-")[0]) if requested else 0
                body = outer.payload[start:]
                self.send_response(206 if requested else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if outer.cut_first and len(outer.ranges) == 1:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/{RELEASE}.tar.bz2"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def archive(tone_dir: Path) -> bytes:
    return release_archive(tone_dir)


def test_pull_verifies_and_installs(tmp_path: Path, archive: bytes) -> None:
    import hashlib

    server = ArchiveServer(archive)
    try:
        models = ModelsConfig(cache_dir=tmp_path, sensevoice_url=server.url,
                              sensevoice_sha256=hashlib.sha256(archive).hexdigest())
        install_into(REGISTRY["sensevoice"], tmp_path / "sensevoice", models)
    finally:
        server.close()
    installed = tmp_path / "sensevoice"
    assert sorted(p.name for p in installed.iterdir()) == [".complete", ".revision", "model.int8.onnx", "tokens.txt"]
    assert load_sense_voice_model(installed).vocab_size == 24
    assert verify_installed(installed) == []
    assert not list(tmp_path.glob("*.tar.bz2*"))  # the archive is not kept


def test_checksum_mismatch_installs_nothing(tmp_path: Path, archive: bytes) -> None:
    server = ArchiveServer(archive)
    try:
        models = ModelsConfig(cache_dir=tmp_path, sensevoice_url=server.url, sensevoice_sha256="0" * 64)
        with pytest.raises(DownloadError, match="does not match"):
            install_into(REGISTRY["sensevoice"], tmp_path / "sensevoice", models)
    finally:
        server.close()
    assert not (tmp_path / "sensevoice").exists()
    assert not list(tmp_path.glob("*.partial"))


def test_interrupted_download_resumes_with_a_range_request(tmp_path: Path, archive: bytes) -> None:
    import hashlib

    server = ArchiveServer(archive, cut_first=True)
    try:
        models = ModelsConfig(cache_dir=tmp_path, sensevoice_url=server.url,
                              sensevoice_sha256=hashlib.sha256(archive).hexdigest())
        with pytest.raises(DownloadError, match="resume"):
            install_into(REGISTRY["sensevoice"], tmp_path / "sensevoice", models)
        assert verify_installed(tmp_path / "sensevoice")  # nothing looks installed
        partial = tmp_path / f"{RELEASE}.tar.bz2.partial"
        assert 0 < partial.stat().st_size < len(archive)
        install_into(REGISTRY["sensevoice"], tmp_path / "sensevoice", models)
    finally:
        server.close()
    assert server.ranges[0] is None and server.ranges[1] == f"bytes={len(archive) // 2}-"
    assert verify_installed(tmp_path / "sensevoice") == []
    assert sha256_file(tmp_path / "sensevoice" / "model.int8.onnx")


def test_offline_pull_fails_fast_with_instructions(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    closed = f"http://127.0.0.1:{free_port()}/{RELEASE}.tar.bz2"
    config.write_text(f"models:\n  cache_dir: {tmp_path}\n  sensevoice_url: {closed}\n"
                      f"  sensevoice_sha256: {'a' * 64}\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "kitt_stt", "models", "pull", "sensevoice", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 15
    assert result.returncode == 2
    assert "cannot reach" in result.stderr and "by hand" in result.stderr and "asr.model" in result.stderr
    assert not (tmp_path / "sensevoice").exists()


def test_another_url_without_a_pinned_sha256_is_refused_before_downloading(tmp_path: Path, archive: bytes) -> None:
    """No digest, no install: the archive is not even fetched (an unverified model would serve every car)."""
    server = ArchiveServer(archive)
    try:
        models = ModelsConfig(cache_dir=tmp_path, sensevoice_url=server.url)
        with pytest.raises(DownloadError, match="refusing to install an unverified model"):
            install_into(REGISTRY["sensevoice"], tmp_path / "sensevoice", models)
    finally:
        server.close()
    assert server.ranges == []
    assert not (tmp_path / "sensevoice").exists()


def test_the_official_release_is_always_checked_against_its_pinned_sha256() -> None:
    assert expected_sha256(DEFAULT_URL, None) == OFFICIAL_SHA256
    assert ModelsConfig().sensevoice_url == DEFAULT_URL
    assert expected_sha256(DEFAULT_URL, "AB" * 32) == "ab" * 32  # a configured pin wins


@pytest.mark.parametrize("deployment_config", ["config-k8s.yaml", "config-k3s-orin.yaml"])
def test_deployment_configs_refuse_an_archive_with_another_sha256(tmp_path: Path, archive: bytes,
                                                                   deployment_config: str) -> None:
    """What the fill Job and the Orin init container run (`models pull sensevoice --config` on the
    deployment config): a file that is not the official release is deleted and nothing installed."""
    server = ArchiveServer(archive)
    config = tmp_path / "c.yaml"
    config.write_text(f"extends: {REPO / deployment_config}\n"
                      f"models:\n  cache_dir: {tmp_path}\n  sensevoice_url: {server.url}\n")
    try:
        result = subprocess.run([sys.executable, "-m", "kitt_stt", "models", "pull", "sensevoice", "--config",
                                 str(config)], capture_output=True, text=True, timeout=60, cwd=REPO)
    finally:
        server.close()
    assert result.returncode != 0, result.stderr
    assert f"does not match the expected {OFFICIAL_SHA256}" in result.stderr
    assert server.ranges == [None]  # it was downloaded, then refused
    assert not (tmp_path / "sensevoice").exists()
    assert not list(tmp_path.glob("*.tar.bz2*"))
