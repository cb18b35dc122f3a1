"""Read an ONNX file's metadata and graph inputs/outputs without loading its weights.

``onnx.load`` parses every initializer (900 MB for SenseVoice fp32) just to read a few
strings.  ONNX files are protobuf, so we walk the top-level fields of ``ModelProto`` over a
memory map, skip the big ones by their length prefix, and parse only ``metadata_props`` and
the graph's ``input``/``output`` value infos with onnx's own message classes.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

from onnx import StringStringEntryProto, TensorProto, ValueInfoProto

_MODEL_GRAPH = 7
_MODEL_METADATA = 14
_GRAPH_INPUT = 11
_GRAPH_OUTPUT = 12


class OnnxHeaderError(ValueError):
    """The file is not a readable ONNX model."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class OnnxHeader:
    metadata: dict[str, str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


def _varint(buf: mmap.mmap | memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise OnnxHeaderError("truncated or corrupt protobuf varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: mmap.mmap | memoryview, start: int, end: int):
    """Yield (field number, wire type, value start, value end) for each field in [start, end)."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = _varint(buf, pos, end)
        elif wire == 1:
            after = pos + 8
        elif wire == 5:
            after = pos + 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            after = pos + length
        else:
            raise OnnxHeaderError(f"unsupported protobuf wire type {wire}")
        if after > end:
            raise OnnxHeaderError("truncated protobuf field (file cut short?)")
        yield number, wire, pos, after
        pos = after


def _spec(info: ValueInfoProto) -> TensorSpec:
    tensor = info.type.tensor_type
    dims: list[int | str | None] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return TensorSpec(info.name, TensorProto.DataType.Name(tensor.elem_type).lower(), tuple(dims))


def read_onnx_header(path: Path) -> OnnxHeader:
    metadata: dict[str, str] = {}
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            size = len(buf)
            saw_graph = False
            for number, wire, start, end in _fields(buf, 0, size):
                if wire != 2:
                    continue
                if number == _MODEL_METADATA:
                    entry = StringStringEntryProto.FromString(buf[start:end])
                    metadata[entry.key] = entry.value
                elif number == _MODEL_GRAPH:
                    saw_graph = True
                    for inner, inner_wire, s, e in _fields(buf, start, end):
                        if inner_wire == 2 and inner in (_GRAPH_INPUT, _GRAPH_OUTPUT):
                            spec = _spec(ValueInfoProto.FromString(buf[s:e]))
                            (inputs if inner == _GRAPH_INPUT else outputs).append(spec)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OnnxHeaderError):
            raise OnnxHeaderError(f"{path}: {exc}") from None
        raise OnnxHeaderError(f"{path}: cannot read ONNX file: {exc}") from None
    except Exception as exc:  # protobuf DecodeError and friends
        raise OnnxHeaderError(f"{path}: not a valid ONNX file ({exc.__class__.__name__})") from None
    if not saw_graph:
        raise OnnxHeaderError(f"{path}: not a valid ONNX file (no graph)")
    return OnnxHeader(metadata, inputs, outputs)
