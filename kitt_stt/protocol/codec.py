"""msgpack <-> typed frames.  Anything malformed becomes a :class:`ProtocolError`."""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import ValidationError

from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import CLIENT_FRAME_TYPES, ClientFrame, ServerFrame

# Bounds for msgpack itself, so a hostile frame cannot make the unpacker allocate wildly.
_UNPACK_LIMITS: dict[str, int] = {
    "max_str_len": 64 * 1024,
    "max_bin_len": 1 << 20,
    "max_array_len": 4096,
    "max_map_len": 256,
    "max_ext_len": 0,
}


def decode_client_frame(payload: bytes) -> ClientFrame:
    """One binary WebSocket message -> one typed client frame."""
    try:
        data: Any = msgpack.unpackb(payload, raw=False, strict_map_key=True, **_UNPACK_LIMITS)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(ErrorCode.BAD_FRAME, f"not a msgpack message: {exc.__class__.__name__}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"a frame must be a msgpack map, got {type(data).__name__}")
    frame_type = data.get("type")
    seat = data.get("seat") if isinstance(data.get("seat"), str) else None
    if not isinstance(frame_type, str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "a frame needs a string field 'type'", seat)
    model = CLIENT_FRAME_TYPES.get(frame_type)
    if model is None:
        known = ", ".join(CLIENT_FRAME_TYPES)
        raise ProtocolError(ErrorCode.BAD_FRAME, f"unknown frame type {frame_type[:40]!r}; known: {known}", seat)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, _field_message(frame_type, exc), seat) from None


def _field_message(frame_type: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"]) or "frame"
        parts.append(f"{where}: {item['msg']}")
    return f"{frame_type} frame: " + "; ".join(parts)


def encode_server_frame(frame: ServerFrame) -> bytes:
    packed = msgpack.packb(frame.model_dump(mode="json"), use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed
