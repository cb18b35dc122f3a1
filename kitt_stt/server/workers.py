"""``server.workers`` > 1: that many server processes on one port, each with its own event loop,
sessions and models (docs/configuration.md, "Workers").

Every frame of every session is handled on its process's one event loop, so one process uses one
core; N processes use N. Each worker binds its own listening socket with ``SO_REUSEPORT`` and the
kernel spreads new connections over them by a hash of the addresses (a session stays on the worker
that took it). A worker binds only once its models are loaded, so none is handed connections while
it loads. This process, the supervisor, loads nothing: it checks the port is free, gives the workers
a fresh metrics directory (prometheus-client's multiprocess mode: a scrape of any worker reports
them all), a shared :class:`~kitt_stt.server.board.WorkerBoard` (seats for the server-wide seat cap
and readiness, heartbeats for liveness), serves ``/livez`` when ``server.liveness_port`` is set, and
forwards SIGTERM/SIGINT: each worker drains its own sessions, as a single process does.

A worker that exits on its own (a crash, a failed start) stops the server: the others are drained
and the supervisor exits 1, so the orchestrator restarts the pod as it would a single process.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from kitt_stt.config.schema import AppConfig
from kitt_stt.server.board import WorkerBoard
from kitt_stt.server.liveness import start_liveness

log = logging.getLogger(__name__)

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
METRICS_PREFIX = "kitt-stt-metrics-"


def serve_workers(config: AppConfig, host: str, port: int) -> int:
    """Run ``server.workers`` worker processes until a signal's drain ends them; the exit status."""
    server = config.server
    board = WorkerBoard.shared(server.workers)
    try:
        _check_port_free(host, port)
        listener = None if server.liveness_port is None else \
            start_liveness(host, server.liveness_port, board, server.liveness_stall_s)
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port} or the liveness port: {exc}", file=sys.stderr)
        return 1
    _remove_stale_metrics()
    metrics_dir = Path(tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-"))  # fresh per start: no stale series
    os.environ[METRICS_DIR_ENV] = str(metrics_dir)  # before any worker imports prometheus-client
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of threads or CUDA state
    workers = [context.Process(target=_worker, args=(config, host, port, index, board), name=f"kitt-stt-worker-{index}")
               for index in range(server.workers)]
    stopping = False

    def forward(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:  # the first signal drains each worker, a second one ends it at once
            if worker.pid is not None and worker.exitcode is None:
                os.kill(worker.pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    try:
        for worker in workers:
            worker.start()
        log.info("%d workers on %s:%d (pids %s)", len(workers), host, port, [worker.pid for worker in workers])
        while live := [worker for worker in workers if worker.exitcode is None]:
            multiprocessing.connection.wait([worker.sentinel for worker in live], timeout=1.0)
            for worker in workers:
                if worker.exitcode is not None and worker.pid is not None:
                    _forget(metrics_dir, worker.pid)
            ended = [worker for worker in workers if worker.exitcode is not None]
            if ended and not stopping:
                log.error("worker %s exited with %s; draining the others and exiting", ended[0].name,
                          ended[0].exitcode)
                status = 1
                forward(signal.SIGTERM, None)
        return status or int(any(worker.exitcode for worker in workers))
    finally:
        for worker in workers:
            if worker.exitcode is None:
                worker.kill()
        if listener is not None:
            listener.shutdown()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _check_port_free(host: str, port: int) -> None:
    """Bind the port once without SO_REUSEPORT: a server already there (another kitt-stt included,
    which would otherwise silently share its port with these workers) fails the start."""
    if port == 0:
        raise OSError("server.workers > 1 share one port: set server.port (0 would give each its own)")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def _remove_stale_metrics() -> None:
    """Directories a supervisor killed outright (SIGKILL, OOM) left behind: its pid is gone, or is
    this process's own (a restarted container's PID 1 on a pod's emptyDir /tmp)."""
    for stale in Path(tempfile.gettempdir()).glob(f"{METRICS_PREFIX}*-*"):
        pid = stale.name[len(METRICS_PREFIX):].partition("-")[0]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _forget(metrics_dir: Path, pid: int) -> None:
    """A worker is gone: its live gauges leave the sums (its counters stay, as they do in one process)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, str(metrics_dir))


def _listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def _worker(config: AppConfig, host: str, port: int, index: int, board: WorkerBoard) -> None:
    """One worker process: load the models, bind, serve until drained."""
    from kitt_stt.logs import configure_logging
    from kitt_stt.server.runner import run
    from kitt_stt.server.startup import StartupError, load_app

    os.setpgid(0, 0)  # signals come from the supervisor (a terminal's Ctrl-C would otherwise arrive twice)
    threading.Thread(target=_end_with_supervisor, args=(os.getppid(),), name="supervisor-watch", daemon=True).start()
    log_buffer = configure_logging(config)
    try:
        app = load_app(config, log_buffer)
    except StartupError as exc:
        log.error("worker %d: %s", index, exc)
        sys.exit(2)
    state = app.state.service
    state.board, state.worker = board, index
    run(app, host, port, config.server.max_message_bytes, config.logging.level, sockets=[_listening_socket(host, port)])


def _end_with_supervisor(supervisor: int) -> None:
    """A supervisor killed outright (SIGKILL) forwards nothing: drain and exit when it is gone."""
    while os.getppid() == supervisor:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
