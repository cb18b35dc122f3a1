"""The acceptance run's children: each in its own process group with its own log, a deadline
after which the whole group (a server included) is killed, optionally pinned to CPU cores.

Children get the private target folder first on ``PYTHONPATH`` (its onnxruntime, the GPU build,
shadows the host's CPU one), the NVIDIA wheels' library folders on ``LD_LIBRARY_PATH`` (read by
the loader at process start), no index for pip when offline, and ``NO_PROXY`` for loopback: the
arms' clients must reach their servers directly even where a proxy is configured.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child_env(base: Mapping[str, str], target: Path, library_dirs: list[str], offline: bool) -> dict[str, str]:
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    libraries = [*library_dirs, *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
    env["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys(libraries))
    if offline:
        env["PIP_NO_INDEX"] = "1"
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(filter(None, [env.get(name), "127.0.0.1", "localhost"]))
    return env


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    deadline: float  # time.monotonic() after which it is killed
    log: Path


def start(name: str, command: list[str], limit: float, logs: Path, env: dict[str, str],
          cores: list[int] | None = None) -> Child:
    log = logs / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        handle.write(("$ " + " ".join(command) + "\n").encode())
        handle.flush()

        def pin() -> None:
            os.setsid()
            if cores:
                os.sched_setaffinity(0, cores)

        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                   preexec_fn=pin)
    return Child(name, process, time.monotonic() + limit, log)


def wait_all(children: list[Child]) -> list[str]:
    """Wait for every child until its deadline; one past it is killed with its group."""
    problems = []
    for child in children:
        try:
            child.process.wait(timeout=max(0.0, child.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait()
            problems.append(f"{child.name}: cut at its time limit (what it finished is kept)")
            continue
        if child.process.returncode != 0:
            tail = "\n".join(child.log.read_text(errors="replace").strip().splitlines()[-6:])
            problems.append(f"{child.name} exited {child.process.returncode}:\n{tail}")
    return problems


def core_split(count: int) -> list[list[int] | None]:
    """Disjoint CPU core sets for arms that run side by side (None: no pinning)."""
    cores = sorted(os.sched_getaffinity(0))
    if count <= 1 or len(cores) < 2 * count:
        return [None] * count
    size = len(cores) // count
    return [cores[index * size:(index + 1) * size] for index in range(count)]
