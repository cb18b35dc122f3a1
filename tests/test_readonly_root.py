"""The service on a read-only root, as the pods run it (issue 37, docs/deployment.md).

The images' /app (the working directory) is read-only and HOME points nowhere useful
(/nonexistent); only /tmp (an emptyDir) and the volumes are writable. Nothing may depend on
writing to the working directory or under HOME: tracing.path's default is absolute, under the
temporary directory, and onnxruntime's telemetry, which writes under $HOME/.cache at import, is
off. Here the test runs as whoever runs the suite (often root, which a mode of 0555 does not
stop), so instead of relying on a refused write, each test checks that nothing was written where
it must not be.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from kitt_stt.config.loader import load_config
from kitt_stt.observability.trace import TracePathError, check_trace_path
from tests.helpers import TEST_CONFIG, deep_merge, free_port

REPO = Path(__file__).resolve().parents[1]


def _pod_like_env(tmp: Path) -> dict[str, str]:
    """The test's environment as a pod sees it: no HOME, TMPDIR the only writable place, no
    KITT_STT or onnxruntime switches inherited from the developer's shell."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KITT_STT", "ORT_", "XDG_")) and k not in {"HOME", "TMPDIR"}}
    env["TMPDIR"] = str(tmp)
    env["PYTHONPATH"] = str(REPO)  # this tree's kitt_stt, whatever the working directory
    return env


def _read_only_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o555)
    return path


@pytest.mark.parametrize("config", ["config.yaml", "config-k8s.yaml", "config-k3s-orin.yaml"])
def test_the_trace_path_default_is_absolute_under_the_temporary_directory(config: str) -> None:
    path = load_config(REPO / config).config.tracing.path
    assert path.is_absolute(), f"{config}: tracing.path {path} depends on the working directory (/app, read-only)"
    assert path.is_relative_to(tempfile.gettempdir())


def test_an_unwritable_trace_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(TracePathError, match=r"tracing.path .*cannot write in .*/tmp"):
        check_trace_path(blocker / "trace.json.gz")


def test_importing_kitt_stt_turns_off_onnxruntime_telemetry(tmp_path: Path) -> None:
    """onnxruntime writes a device id and a database under $HOME/.cache at import unless told not to."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**_pod_like_env(tmp_path), "HOME": str(home)}
    result = subprocess.run([sys.executable, "-c", "import kitt_stt, onnxruntime"],
                            cwd=_read_only_dir(tmp_path / "app"), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not any(home.rglob("*")), f"written under HOME: {sorted(str(p) for p in home.rglob('*'))}"


def _serve(tmp_path: Path, model_cache: Path, overrides: dict) -> tuple[subprocess.Popen, int, Path, Path]:
    """`kitt-stt serve` from a read-only working directory with HOME unset; (process, port, log, cwd)."""
    config = deep_merge(deep_merge(TEST_CONFIG, {"models": {"cache_dir": str(model_cache)}}), overrides)
    config_path = tmp_path / "server.yaml"
    config_path.write_text(yaml.safe_dump(config))
    writable = tmp_path / "tmp"
    writable.mkdir()
    cwd = _read_only_dir(tmp_path / "app")
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kitt_stt", "serve", "--config", str(config_path),
                                    "--port", str(port)], cwd=cwd, env=_pod_like_env(writable),
                                   stdout=out, stderr=subprocess.STDOUT)
    return process, port, log, cwd


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_the_server_traces_from_a_read_only_working_directory(tmp_path: Path, model_cache: Path) -> None:
    process, port, log, cwd = _serve(tmp_path, model_cache, {"tracing": {"enabled": True, "flush_interval_s": 0.2}})
    trace = tmp_path / "tmp" / "kitt-stt" / "kitt-stt.trace.json.gz"
    try:
        deadline = time.monotonic() + 60
        while not trace.exists():
            assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no trace at {trace}:\n{log.read_text()}"
            time.sleep(0.1)
        while not _healthy(port):  # the trace starts in the lifespan, before uvicorn binds the port
            assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"never healthy:\n{log.read_text()}"
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=20)
    with gzip.open(trace) as handle:
        assert "traceEvents" in json.load(handle)
    assert not any(cwd.iterdir()), "nothing is written to the working directory"


def test_an_unwritable_trace_path_stops_the_server_at_start(tmp_path: Path, model_cache: Path) -> None:
    blocker = tmp_path / "read-only-root"
    blocker.write_text("")
    process, _, log, _ = _serve(tmp_path, model_cache,
                                {"tracing": {"enabled": True, "path": str(blocker / "trace.json.gz")}})
    try:
        assert process.wait(timeout=60) != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert f"tracing.path {blocker / 'trace.json.gz'}: cannot write" in log.read_text()
