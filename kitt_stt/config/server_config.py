"""The ``server:`` section: listening, auth, and every per-connection limit (docs/configuration.md)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kitt_stt.config.section import Section


class RateLimitConfig(Section):
    """Per-seat audio budget: ``burst_ms`` of audio at once, then ``realtime_factor`` x real time."""

    realtime_factor: float = Field(default=4.0, gt=0)
    burst_ms: int = Field(default=10_000, ge=1000)


class SegmentStartBudget(Section):
    """Per-seat budget for opening segments (each one costs a final decode): ``burst`` at once,
    then ``per_s`` a second. Real speech opens at most ~2 a second (start + silence hysteresis)."""

    per_s: float = Field(default=2.0, gt=0)
    burst: int = Field(default=10, ge=1)


class HotwordChangeBudget(Section):
    """Per-connection budget for changing hotwords (``start``/``configure``): ``burst`` at once, then
    ``per_s`` a second. Each new list costs a trie build (up to ~0.1 s of CPU for 1000 long words);
    a car changes its list when the context does (contacts, a destination), not several times a second."""

    per_s: float = Field(default=0.5, gt=0)
    burst: int = Field(default=5, ge=1)


def quoted_token(value: object) -> object:
    """A token must be text as written: YAML reads unquoted 0123 as 83, 0x1F as 31 and 12:30 as 750."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"write the token as a quoted string (YAML read it as {type(value).__name__} {value!r}), "
                         'e.g. token: "0123"')
    return value


class ServerConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    path: str = "/stt/sensevoice"
    auth_token: str | None = None
    metrics_auth: bool = False
    max_connections: int = Field(default=64, ge=1)
    max_connections_per_client_ip: int | None = Field(default=None, ge=1)
    idle_timeout_s: float = Field(default=60.0, ge=0)
    max_pending_decodes: int = Field(default=32, ge=1, le=10_000)
    max_messages_per_s: int = Field(default=2000, ge=10)
    # and at most this many bytes a second (one second's worth at once): 8 seats at the audio rate
    # limit send 1 MiB/s; a flood of 130 KB hotword lists otherwise kept the event loop busy
    max_read_bytes_per_s: int = Field(default=4 << 20, ge=64 << 10)
    segment_starts: SegmentStartBudget = SegmentStartBudget()
    hotword_changes: HotwordChangeBudget = HotwordChangeBudget()
    max_seats: int = Field(default=8, ge=1, le=64)
    # Seats of all connections on this server (all its workers together): a seat beyond it is refused
    # (`overloaded`) and /readyz answers 503 `full` while it is reached; null: only max_connections x max_seats
    max_server_seats: int | None = Field(default=None, ge=1)
    # Server processes on one port (SO_REUSEPORT), each with its own event loop, sessions and models
    workers: int = Field(default=1, ge=1, le=64)
    # /livez on a port of its own, answered by a thread: fails when an event loop has made no progress
    # for liveness_stall_s (wedged, not busy) or a worker failed; null: no such listener
    liveness_port: int | None = Field(default=None, ge=1, le=65535)
    liveness_stall_s: float = Field(default=10.0, gt=0, le=600)
    max_frame_ms: int = Field(default=1000, ge=10, le=1000)
    max_message_bytes: int = Field(default=1 << 20, ge=4096)
    outbound_queue_frames: int = Field(default=2000, ge=10)
    # A client that does not read is closed (slow_consumer) before its answers use this much memory,
    # or when its socket has taken nothing for send_stall_s (docs/protocol.md).
    max_outbox_bytes: int = Field(default=4 << 20, ge=64 << 10)
    send_stall_s: float = Field(default=10.0, gt=0, le=300)
    rate_limit: RateLimitConfig = RateLimitConfig()
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    # The browser console (docs/console.md): a debugging page served at /console. Off in the
    # Kubernetes overlays, where nobody should talk to a production pod from a browser.
    console: bool = True
    # /openapi.json, /docs, /redoc: behind auth_token when one is set; off in the Kubernetes overlays.
    api_docs: bool = True

    _auth_token_is_text = field_validator("auth_token", mode="before")(quoted_token)

    @field_validator("auth_token")
    @classmethod
    def _token_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty auth token would turn authentication off: remove the key (or set null) "
                             "to run without auth, or set a real token")
        return value

    @model_validator(mode="after")
    def _workers_need_a_port(self) -> ServerConfig:
        if self.workers > 1 and self.port == 0:
            raise ValueError("server.workers > 1 share one port: set server.port (0 would give each its own)")
        if self.liveness_port is not None and self.liveness_port == self.port:
            raise ValueError("server.liveness_port must differ from server.port")
        return self

    @model_validator(mode="after")
    def _metrics_auth_needs_token(self) -> ServerConfig:
        if self.metrics_auth and not self.auth_token:
            raise ValueError("server.metrics_auth needs server.auth_token")
        return self
