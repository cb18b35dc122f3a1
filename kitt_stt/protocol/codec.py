"""msgpack <-> typed frames.  Anything malformed becomes a :class:`ProtocolError`."""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import ValidationError

from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import CLIENT_FRAME_TYPES, ClientFrame, ServerFrame, printable
from kitt_stt.quote import quoted

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
    seat = _echoable_seat(data.get("seat"))
    if not isinstance(frame_type, str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "a frame needs a string field 'type'", seat)
    model = CLIENT_FRAME_TYPES.get(frame_type)
    if model is not None and "seat" not in data:
        seat = _default_seat(model)  # an audio frame without a seat is the "default" seat's
    if model is None:
        known = ", ".join(CLIENT_FRAME_TYPES)
        raise ProtocolError(ErrorCode.BAD_FRAME, f"unknown frame type {quoted(frame_type)}; known: {known}", seat)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, _field_message(frame_type, exc), seat) from None


def _echoable_seat(value: object) -> str | None:
    """The frame's seat, for the error frame, only when it is a valid seat name: a refused name
    (a bidi override, say) must not travel back to clients, logs and traces."""
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        return None
    try:
        return printable(value)
    except ValueError:
        return None


def _default_seat(model: type[ClientFrame]) -> str | None:
    """The seat a frame of this type means when it names none: ``"default"``, or None (finalize: all)."""
    field = model.model_fields.get("seat")
    return field.default if field is not None and isinstance(field.default, str) else None


def _field_message(frame_type: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"]) or "frame"
        parts.append(f"{where}: {item['msg']}")
    return f"{frame_type} frame: " + "; ".join(parts)


def encode_server_frame(frame: ServerFrame) -> bytes:
    """One server frame -> one msgpack map; echoed client values keep their msgpack type.

    Every other field goes through pydantic's JSON mode (enums and models become plain values);
    ``echo_fields`` (the pong's ``id``) are packed exactly as the client's frame held them, so
    bytes come back as msgpack bin, not as a string.
    """
    echoed = frame.echo_fields
    data = frame.model_dump(mode="json", exclude=set(echoed))
    data.update({name: getattr(frame, name) for name in echoed})
    packed = msgpack.packb(data, use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed
