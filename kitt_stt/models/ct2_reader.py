"""Read the tensors of a CTranslate2 ``model.bin`` (binary format version 6) with numpy only.

The whisper-base weights we can get on these machines ship in CTranslate2's format, and the
``ctranslate2`` package only runs them; it cannot hand them back. The format is small: a header,
then named tensors (rank, dims, dtype, raw little-endian bytes), then name aliases. We read it
ourselves so the conversion depends on nothing but numpy (and torch for the export).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUPPORTED_VERSION = 6

# CTranslate2's DataType enum, in its order.
_DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
}


class Ct2FormatError(Exception):
    pass


@dataclass(frozen=True)
class Ct2Model:
    spec: str
    revision: int
    variables: dict[str, np.ndarray]

    def tensor(self, name: str) -> np.ndarray:
        """A variable as float32 (weights are stored as float16); a clear error names a missing one."""
        try:
            return self.variables[name].astype(np.float32)
        except KeyError:
            raise Ct2FormatError(f"model.bin has no variable {name!r} (is this a Whisper model?)") from None

    def scalar(self, name: str) -> int:
        return int(self.variables[name].reshape(-1)[0])


class _Cursor:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise Ct2FormatError(f"truncated model.bin: needed {size} bytes at offset {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def string(self) -> str:
        length = self.unpack("<H")
        raw = bytes(self.take(length))
        return raw.rstrip(b"\0").decode("utf-8")

    def take(self, count: int) -> memoryview:
        if self.pos + count > len(self.data):
            raise Ct2FormatError(f"truncated model.bin: a tensor of {count} bytes runs past the end")
        view = self.data[self.pos:self.pos + count]
        self.pos += count
        return view


def read_ct2_model(path: Path) -> Ct2Model:
    """Parse ``path``; aliases (e.g. a projection tied to the embedding) resolve to the same array."""
    data = memoryview(path.read_bytes())
    cursor = _Cursor(data)
    version = cursor.unpack("<I")
    if version != SUPPORTED_VERSION:
        raise Ct2FormatError(f"{path}: CTranslate2 binary version {version}, only {SUPPORTED_VERSION} is supported")
    spec = cursor.string()
    revision = cursor.unpack("<I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(cursor.unpack("<I")):
        name = cursor.string()
        dims = [cursor.unpack("<I") for _ in range(cursor.unpack("<B"))]
        dtype_id = cursor.unpack("<B")
        size = cursor.unpack("<I")
        dtype = _DTYPES.get(dtype_id)
        if dtype is None:
            raise Ct2FormatError(f"{path}: variable {name!r} has unsupported dtype id {dtype_id}")
        expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise Ct2FormatError(f"{path}: variable {name!r} has {size} bytes, its shape {dims} needs {expected}")
        variables[name] = np.frombuffer(cursor.take(size), dtype=dtype).reshape(dims)
    for _ in range(cursor.unpack("<I")):
        alias, target = cursor.string(), cursor.string()
        if target not in variables:
            raise Ct2FormatError(f"{path}: alias {alias!r} points to missing variable {target!r}")
        variables[alias] = variables[target]
    if cursor.pos != len(data):
        raise Ct2FormatError(f"{path}: {len(data) - cursor.pos} unexpected bytes after the last alias")
    return Ct2Model(spec=spec, revision=revision, variables=variables)
