"""Property tests: no input makes the frame decoder fail with anything but a ProtocolError."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from kitt_stt.protocol.codec import decode_client_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import CLIENT_FRAME_TYPES, ClientFrame

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
                    st.floats(allow_nan=True), st.text(max_size=40), st.binary(max_size=700))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=10)
field_names = st.sampled_from(["seat", "seq", "pcm", "event", "language", "hotwords", "interim", "seats",
                               "client", "id", "sample_rate", "extra"])


def decode_or_error(payload: bytes) -> ClientFrame | ProtocolError:
    try:
        return decode_client_frame(payload)
    except ProtocolError as error:
        return error


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes(payload: bytes) -> None:
    result = decode_or_error(payload)
    assert isinstance(result, (ClientFrame, ProtocolError))
    if isinstance(result, ProtocolError):
        assert result.code in (ErrorCode.BAD_FRAME, ErrorCode.BAD_FIELD) and result.message


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([*CLIENT_FRAME_TYPES, "unknown", ""]), st.dictionaries(field_names, values, max_size=6))
def test_frames_with_arbitrary_fields(frame_type: str, fields: dict) -> None:
    payload = msgpack.packb({"type": frame_type, **fields}, use_bin_type=True)
    result = decode_or_error(payload)
    if frame_type not in CLIENT_FRAME_TYPES:
        assert isinstance(result, ProtocolError) and result.code is ErrorCode.BAD_FRAME
    else:
        assert isinstance(result, (ClientFrame, ProtocolError))
        if isinstance(result, ProtocolError):
            assert result.code is ErrorCode.BAD_FIELD and frame_type in result.message


@settings(max_examples=200, deadline=None)
@given(values)
def test_non_map_messages_are_bad_frames(value: object) -> None:
    payload = msgpack.packb(value, use_bin_type=True)
    result = decode_or_error(payload)
    if not isinstance(value, dict):
        assert isinstance(result, ProtocolError) and result.code is ErrorCode.BAD_FRAME
