"""``GET /livez`` on ``server.liveness_port``, answered by a thread of its own, not the event loop.

``/healthz`` is answered on the loop that handles every frame: a loop that is busy (saturated, not
dead) answers late, the kubelet's 3 s timeout fails it three times, and the pod is restarted, its
cars landing on pods as loaded. Here a thread reads the :class:`~kitt_stt.server.board.WorkerBoard`
instead: 503 when a worker's loop has not ticked for ``server.liveness_stall_s`` (wedged: blocked
in a call that never returns, a deadlock) or a worker failed (a dead decode worker, a failed engine
build: what ``/healthz`` reports); 200 otherwise, however late the ticks are. A busy Python loop
lets this thread run at the interpreter's switch interval (5 ms), so the answer does not wait for it.
With ``server.workers`` > 1 the supervisor process serves it for all workers.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kitt_stt.server.board import WorkerBoard


def liveness(board: WorkerBoard, stall_s: float) -> tuple[int, dict[str, Any]]:
    """The answer: (HTTP status, body). A worker whose loop has not ticked yet is still loading:
    the startup probe, not this one, bounds that."""
    rows = board.view()
    failed = [row.index for row in rows if row.failed]
    stalled = [row.index for row in rows if row.heartbeat_age_s is not None and row.heartbeat_age_s > stall_s]
    status = "failed" if failed else "stalled" if stalled else "alive"
    body: dict[str, Any] = {"status": status, "workers": [
        {"seats": row.seats, "serving": row.serving, "failed": row.failed,
         "tick_age_s": None if row.heartbeat_age_s is None else round(row.heartbeat_age_s, 3)} for row in rows]}
    if stalled:
        body["error"] = f"worker(s) {stalled}: no event-loop progress for more than {stall_s:g} s"
    elif failed:
        body["error"] = f"worker(s) {failed} failed (their /healthz says why)"
    return (200 if status == "alive" else 503), body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)


def start_liveness(host: str, port: int, board: WorkerBoard, stall_s: float) -> ThreadingHTTPServer:
    """Bind ``host:port`` now (a taken port fails start-up) and serve on a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.partition("?")[0] != "/livez":
                self.send_error(404)
                return
            status, body = liveness(board, stall_s)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # a probe every 10 s is not worth a log line

    server = _Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="liveness", daemon=True).start()
    return server
