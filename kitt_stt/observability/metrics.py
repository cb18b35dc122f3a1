"""Prometheus metrics of one service instance, on a registry of its own.

Frame-level series are updated where frames pass anyway (the connection's receive loop and
its ``send``), decode series by the scheduler's observer hook, so the pipeline code does not
carry metric calls on its hot path.

With ``server.workers`` > 1 the server's processes write their series to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode, chosen when the package is first
imported) and a scrape of any worker reads them all: counters and histograms add up, each gauge is
combined as its ``multiprocess_mode`` says (live processes only). Gauges computed at scrape time
cannot be read across processes, so there each worker sets them on its loop's tick
(:meth:`Metrics.refresh`, every second); the process collector (RSS, CPU) is per process and is left
out (the container's figures come from the kubelet).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from kitt_stt.protocol.frames import CommitFrame, ErrorFrame, FinalFrame, ServerFrame

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
DECODE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def multiprocess_mode() -> bool:
    """Whether prometheus-client writes to the shared directory (set before the workers start)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.multiprocess = multiprocess_mode()
        self._bound: dict[Gauge, Callable[[], float]] = {}
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, cpu seconds, fds
        self.connections = Gauge("kitt_live_sessions", "Open WebSocket sessions", registry=registry,
                                 multiprocess_mode="livesum")
        self.connections_total = Counter("kitt_sessions_total", "Sessions accepted", registry=registry)
        self.refused_total = Counter("kitt_sessions_refused_total", "Sessions refused", ["reason"],
                                     registry=registry)
        self.seats = Gauge("kitt_seats", "Live seats across sessions", registry=registry, multiprocess_mode="livesum")
        self.frames_in = Counter("kitt_frames_in_total", "Client frames received", ["type"], registry=registry)
        self.frames_out = Counter("kitt_frames_out_total", "Server frames sent", ["type"], registry=registry)
        self.audio_seconds = Counter("kitt_audio_seconds_total", "Audio accepted, in seconds", registry=registry)
        self.buffered_bytes = Gauge("kitt_buffered_bytes", "Audio and frame bytes held for live sessions",
                                    registry=registry, multiprocess_mode="livesum")
        self.queue_depth = Gauge("kitt_scheduler_queue_depth", "Decodes waiting for a worker", registry=registry,
                                 multiprocess_mode="livesum")
        self.queue_wait = Histogram("kitt_scheduler_queue_wait_seconds", "Time a decode waited for a worker",
                                    ["kind"], buckets=DECODE_BUCKETS, registry=registry)
        self.decode = Histogram("kitt_decode_seconds", "Engine time per decode call", ["kind"],
                                buckets=DECODE_BUCKETS, registry=registry)
        self.final_latency = Histogram("kitt_final_latency_seconds", "End of segment to final frame queued",
                                       buckets=LATENCY_BUCKETS, registry=registry)
        self.eot_latency = Histogram("kitt_eot_latency_seconds", "End of speech to commit (decision wait_ms)",
                                     buckets=LATENCY_BUCKETS, registry=registry)
        self.commits = Counter("kitt_commits_total", "Turn commits", ["reason"], registry=registry)
        self.arbitration = Counter("kitt_arbitration_segments_total",
                                   "Segments seat arbitration judged on multi-seat connections", ["outcome"],
                                   registry=registry)
        self.errors = Counter("kitt_errors_total", "Error frames sent", ["code"], registry=registry)
        self.slow_consumers = Counter("kitt_slow_consumers_total",
                                      "Sessions closed because the client did not read its frames", ["reason"],
                                      registry=registry)
        self.turn_model = Histogram("kitt_turn_model_seconds", "End-of-turn features + model per decision",
                                    buckets=DECODE_BUCKETS, registry=registry)
        self.model_load = Gauge("kitt_model_load_seconds", "Time to load the models at start-up",
                                registry=registry, multiprocess_mode="livemax")
        self.warm_up = Gauge("kitt_warm_up_seconds", "Time of the start-up warm-up decode", registry=registry,
                             multiprocess_mode="livemax")
        self.trace_events = Gauge("kitt_trace_events", "Events retained by the tracer", registry=registry,
                                  multiprocess_mode="livesum")
        self.loop_lag = Gauge("kitt_event_loop_lag_seconds",
                              "How late the event loop's 0.25 s tick woke, the most over the last 5 s (all workers: "
                              "the worst)", registry=registry, multiprocess_mode="livemax")

    def observe_frame_out(self, frame: ServerFrame, kind: str) -> None:
        """A frame queued for a client: counted, and its latencies or error code recorded."""
        self.frames_out.labels(kind).inc()
        if isinstance(frame, FinalFrame):
            self.final_latency.observe(frame.server_latency_ms / 1000.0)
        elif isinstance(frame, CommitFrame):
            decision = frame.metadata["eot"]["decision"]
            self.commits.labels(decision["reason"]).inc()
            self.eot_latency.observe(decision["wait_ms"] / 1000.0)
        elif isinstance(frame, ErrorFrame):
            self.errors.labels(frame.code).inc()

    def bind(self, queue_depth: Callable[[], float], buffered_bytes: Callable[[], float],
             connections: Callable[[], float], seats: Callable[[], float],
             trace_events: Callable[[], float]) -> None:
        """Gauges computed at scrape time from the live state, so they can never drift (in
        multiprocess mode: set by :meth:`refresh`)."""
        self._bound = {self.queue_depth: queue_depth, self.buffered_bytes: buffered_bytes,
                       self.connections: connections, self.seats: seats, self.trace_events: trace_events}
        if not self.multiprocess:
            for gauge, read in self._bound.items():
                gauge.set_function(read)

    def refresh(self) -> None:
        """Multiprocess mode: write the bound gauges' values where the other workers' scrapes read them."""
        if self.multiprocess:
            for gauge, read in self._bound.items():
                gauge.set(read())

    def exposition(self) -> bytes:
        """The text a scrape gets: this process's registry, or every worker's series combined."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        MultiProcessCollector(combined)
        return generate_latest(combined)
