"""Chrome Trace Event Format tracing that producers never wait on.

Why this shape: the old service serialised its trace (indented JSON, gzip, rotation) inside the
lock that producers also took, so recording a span could block an inference thread for up to a
second.  Here a producer's only critical section is one ``deque.append`` plus eviction of the
oldest events, under a lock nobody else holds for longer.  Snapshots copy the deque under that
same short lock (a list copy, microseconds per thousand events); serialising (compact JSON),
compressing, the atomic rename and rotation all happen on the writer thread, outside any lock
producers take.

Events are complete events (``ph: "X"``) with a monotonic clock in microseconds since the
tracer started; ``pid`` is a connection (0: the process-wide scheduler and models) and ``tid``
a seat (or a worker).  Track names are metadata events kept outside the ring, so eviction never
loses them.  Retention is bounded by both event count and (estimated) bytes.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitt_stt.config.schema import default_trace_path

log = logging.getLogger(__name__)

_EVENT_OVERHEAD_BYTES = 96  # keys, punctuation and numbers of one serialised complete event
RENDER_CHUNK = 500


@dataclass(frozen=True)
class Track:
    pid: int
    tid: int


PROCESS_TRACK = Track(0, 0)


def _estimate(name: str, args: dict[str, Any] | None) -> int:
    size = _EVENT_OVERHEAD_BYTES + len(name)
    if args:
        for key, value in args.items():
            size += len(key) + (len(value) if isinstance(value, str) else 12) + 6
    return size


class Tracer:
    def __init__(self, max_events: int = 100_000, max_bytes: int = 32 << 20) -> None:
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._events: deque[tuple[str, str, int, int, int, int, dict[str, Any] | None, int]] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._names: dict[tuple[int, int], tuple[str, str]] = {}
        self._next_pid = 1
        self._origin_ns = time.perf_counter_ns()
        self.enabled = True

    # ----- producers ---------------------------------------------------------------------------

    def now_us(self) -> int:
        return (time.perf_counter_ns() - self._origin_ns) // 1000

    def to_us(self, perf_counter_s: float) -> int:
        """Convert a ``time.perf_counter()`` reading to this trace's clock."""
        return int(perf_counter_s * 1e6) - self._origin_ns // 1000

    def add(self, name: str, category: str, start_us: int, duration_us: int, track: Track,
            args: dict[str, Any] | None = None) -> None:
        """Record one complete span.  Cost: one append (and eviction) under a private lock."""
        if not self.enabled:
            return
        size = _estimate(name, args)
        event = (name, category, start_us, max(duration_us, 0), track.pid, track.tid, args, size)
        with self._lock:
            self._events.append(event)
            self._bytes += size
            while len(self._events) > self._max_events or self._bytes > self._max_bytes:
                self._bytes -= self._events.popleft()[7]

    @contextmanager
    def span(self, name: str, category: str, track: Track, args: dict[str, Any] | None = None) -> Iterator[None]:
        start = self.now_us()
        try:
            yield
        finally:
            self.add(name, category, start, self.now_us() - start, track, args)

    def new_process(self, label: str) -> int:
        """A pid for a new connection, named ``label`` in the viewer."""
        with self._lock:
            pid = self._next_pid
            self._next_pid += 1
            self._names[(pid, -1)] = ("process_name", label)
        return pid

    def name_track(self, track: Track, label: str) -> None:
        with self._lock:
            self._names[(track.pid, track.tid)] = ("thread_name", label)

    def forget_process(self, pid: int) -> None:
        """Drop a closed connection's track names (its events age out of the ring on their own)."""
        with self._lock:
            for key in [key for key in self._names if key[0] == pid]:
                del self._names[key]

    # ----- consumers ---------------------------------------------------------------------------

    @property
    def size(self) -> tuple[int, int]:
        """(events, estimated bytes) currently retained."""
        with self._lock:
            return len(self._events), self._bytes

    def snapshot(self) -> tuple[list, dict]:
        with self._lock:
            return list(self._events), dict(self._names)

    @staticmethod
    def render(events: list, names: dict, chunk: int = RENDER_CHUNK) -> Iterator[str]:
        """Compact Trace Event Format JSON for a snapshot, in pieces.

        Serialising holds the GIL; the caller may yield it between pieces (``time.sleep(0)``)
        so that producer threads never wait for a whole 75k-event document.
        """
        metadata = [{"ph": "M", "name": kind, "pid": pid, "tid": max(tid, 0), "args": {"name": label}}
                    for (pid, tid), (kind, label) in names.items()]
        yield '{"displayTimeUnit":"ms","traceEvents":['
        yield json.dumps(metadata, separators=(",", ":"))[1:-1]
        for start in range(0, len(events), chunk):
            piece = [
                {"ph": "X", "name": name, "cat": category, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
                 **({"args": args} if args else {})}
                for name, category, ts, dur, pid, tid, args, _ in events[start : start + chunk]
            ]
            yield ("," if metadata or start else "") + json.dumps(piece, separators=(",", ":"))[1:-1]
        yield "]}"

    def render_snapshot(self) -> str:
        return "".join(self.render(*self.snapshot()))


class TracePathError(OSError):
    """``tracing.path`` cannot be written: said at start-up, not at the first flush."""


def check_trace_path(path: Path) -> None:
    """Create ``path``'s directory and write a probe file in it, or raise TracePathError saying what to do.

    A real write, not ``os.access``: that answers yes to root and knows nothing of a read-only
    mount (the images' root filesystem in the pods).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TracePathError(
            f"tracing.path {path}: cannot write in {path.parent} ({exc.strerror or exc}); point tracing.path at a "
            f"writable directory: an absolute path under /tmp (the default, {default_trace_path()}) or a "
            "volume (the images' root filesystem is read-only in the pods)") from exc


class TraceWriter:
    """Background thread that periodically writes ``path`` (gzip JSON), rotating old files."""

    def __init__(self, tracer: Tracer, path: Path, interval_s: float, keep_files: int) -> None:
        self._tracer = tracer
        self._path = path
        self._interval_s = interval_s
        self._keep_files = keep_files
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)

    def start(self) -> None:
        check_trace_path(self._path)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            try:
                self.write_now()
            except OSError:
                log.exception("writing the trace to %s failed", self._path)

    def write_now(self) -> Path:
        events, names = self._tracer.snapshot()
        temporary = self._path.with_name(self._path.name + ".partial")
        with gzip.open(temporary, "wb", compresslevel=3) as handle:
            for piece in Tracer.render(events, names):
                handle.write(piece.encode())
                time.sleep(0)  # hand the GIL to any waiting producer between pieces
        self._rotate()
        os.replace(temporary, self._path)
        return self._path

    def _rotate(self) -> None:
        if self._keep_files <= 1 or not self._path.exists():
            return
        for index in range(self._keep_files - 1, 0, -1):
            older = self._path.with_name(f"{self._path.name}.{index}")
            newer = self._path if index == 1 else self._path.with_name(f"{self._path.name}.{index - 1}")
            if newer.exists():
                os.replace(newer, older)
