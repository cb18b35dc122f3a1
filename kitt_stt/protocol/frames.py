"""Typed frames of protocol v1.

Client frames are validated strictly (an int is not a bool, bytes are not a string) but
unknown extra fields are ignored, because the protocol allows fields to be added.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictBytes, StrictInt, StrictStr

PROTOCOL_VERSION = 1
SEAT_PATTERN = r"^[^\x00-\x1f\x7f]{1,64}$"  # any short printable name ("driver", "主驾", "rear left")

Seat = Annotated[StrictStr, Field(pattern=SEAT_PATTERN)]
Language = Annotated[StrictStr, Field(min_length=1, max_length=16)]


class ClientFrame(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class StartFrame(ClientFrame):
    type: Literal["start"]
    language: Language | None = None
    hotwords: list[StrictStr] | None = None
    interim: StrictBool | None = None
    seats: Annotated[list[Seat], Field(max_length=64)] | None = None
    client: Annotated[StrictStr, Field(max_length=128)] | None = None


class AudioFrame(ClientFrame):
    type: Literal["audio"]
    seat: Seat = "default"
    seq: StrictInt | None = None
    pcm: StrictBytes
    sample_rate: StrictInt | None = None


class VadFrame(ClientFrame):
    type: Literal["vad"]
    seat: Seat = "default"
    event: Literal["start", "stop"]


class FinalizeFrame(ClientFrame):
    type: Literal["finalize"]
    seat: Seat | None = None


class ConfigureFrame(ClientFrame):
    type: Literal["configure"]
    hotwords: list[StrictStr] | None = None
    language: Language | None = None
    interim: StrictBool | None = None


class PingFrame(ClientFrame):
    type: Literal["ping"]
    id: Any = None


class CloseFrame(ClientFrame):
    type: Literal["close"]


CLIENT_FRAME_TYPES: dict[str, type[ClientFrame]] = {
    "start": StartFrame,
    "audio": AudioFrame,
    "vad": VadFrame,
    "finalize": FinalizeFrame,
    "configure": ConfigureFrame,
    "ping": PingFrame,
    "close": CloseFrame,
}


class ServerFrame(BaseModel):
    model_config = ConfigDict(frozen=True)


class ModelInfo(BaseModel):
    name: str
    kind: str
    provider: str
    hotwords: bool  # whether the engine applies hotwords (otherwise they are accepted and ignored)


class Limits(BaseModel):
    sample_rate: int
    frame_ms: int
    max_frame_ms: int
    max_seats: int
    max_segment_ms: int
    realtime_factor: float
    burst_ms: int


class ReadyFrame(ServerFrame):
    type: Literal["ready"] = "ready"
    session_id: str
    protocol: int = PROTOCOL_VERSION
    model: ModelInfo
    limits: Limits


class SpeechStartFrame(ServerFrame):
    type: Literal["speech_start"] = "speech_start"
    seat: str
    segment_id: int
    audio_ms: int


class InterimFrame(ServerFrame):
    type: Literal["interim"] = "interim"
    seat: str
    segment_id: int
    text: str
    audio_ms: int


class FinalFrame(ServerFrame):
    type: Literal["final"] = "final"
    seat: str
    segment_id: int
    text: str
    start_ms: int
    end_ms: int
    lang: str | None
    emotion: str | None = None
    event: str | None = None
    server_latency_ms: float
    timing: dict[str, float]
    end_reason: str


class EotDecision(BaseModel):
    reason: Literal["model", "timeout", "stop", "finalize", "max_duration"]
    probability: float | None
    threshold: float | None
    wait_ms: float
    model_ms: float | None


class CommitFrame(ServerFrame):
    type: Literal["commit"] = "commit"
    seat: str
    turn_id: int
    text: str
    segment_ids: list[int]
    metadata: dict[str, Any]


class ErrorFrame(ServerFrame):
    type: Literal["error"] = "error"
    code: str
    message: str
    fatal: bool = False
    seat: str | None = None


class PongFrame(ServerFrame):
    type: Literal["pong"] = "pong"
    id: Any = None
