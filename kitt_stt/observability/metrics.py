"""Prometheus metrics of one service instance, on a registry of its own.

Frame-level series are updated where frames pass anyway (the connection's receive loop and
its ``send``), decode series by the scheduler's observer hook, so the pipeline code does not
carry metric calls on its hot path.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from kitt_stt.protocol.frames import CommitFrame, ErrorFrame, FinalFrame, ServerFrame

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
DECODE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, cpu seconds, fds
        self.connections = Gauge("kitt_live_sessions", "Open WebSocket sessions", registry=registry)
        self.connections_total = Counter("kitt_sessions_total", "Sessions accepted", registry=registry)
        self.refused_total = Counter("kitt_sessions_refused_total", "Sessions refused", ["reason"],
                                     registry=registry)
        self.seats = Gauge("kitt_seats", "Live seats across sessions", registry=registry)
        self.frames_in = Counter("kitt_frames_in_total", "Client frames received", ["type"], registry=registry)
        self.frames_out = Counter("kitt_frames_out_total", "Server frames sent", ["type"], registry=registry)
        self.audio_seconds = Counter("kitt_audio_seconds_total", "Audio accepted, in seconds", registry=registry)
        self.buffered_bytes = Gauge("kitt_buffered_bytes", "Audio and frame bytes held for live sessions",
                                    registry=registry)
        self.queue_depth = Gauge("kitt_scheduler_queue_depth", "Decodes waiting for a worker", registry=registry)
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
                                registry=registry)
        self.warm_up = Gauge("kitt_warm_up_seconds", "Time of the start-up warm-up decode", registry=registry)
        self.trace_events = Gauge("kitt_trace_events", "Events retained by the tracer", registry=registry)

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
        """Gauges computed at scrape time from the live state, so they can never drift."""
        self.queue_depth.set_function(queue_depth)
        self.buffered_bytes.set_function(buffered_bytes)
        self.connections.set_function(connections)
        self.seats.set_function(seats)
        self.trace_events.set_function(trace_events)
