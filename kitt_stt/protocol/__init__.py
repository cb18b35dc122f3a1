"""Wire protocol v1: typed frames (``frames``), error codes (``errors``), msgpack codec (``codec``)."""

from kitt_stt.protocol.codec import decode_client_frame, encode_server_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError

__all__ = ["ErrorCode", "ProtocolError", "decode_client_frame", "encode_server_frame"]
