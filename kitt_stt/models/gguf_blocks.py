"""The two llama.cpp block formats SmolLM2's GGUF uses, read with numpy: Q4_1 (32 weights as
``d*q + m``, 4-bit q) and Q8_0 (32 int8 values and one scale). ``llama_export`` writes graphs from
them; ``turn/text_model.py`` reads the embedding's rows with ``dequantize_rows``.

The bytes are read directly rather than through ``gguf.quants.dequantize`` because the converter
needs the blocks' parts (scales, minimums, nibbles), not only the float weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BLOCK = 32  # weights per block in both formats
_Q4_1_BYTES = 20  # f16 d, f16 m, 16 bytes of nibbles
_Q8_0_BYTES = 34  # f16 d, 32 int8


class BlockFormatError(Exception):
    """A tensor is not in the block format the converter expected."""


def _blocks(tensor: Any, kind: str, width: int) -> np.ndarray:
    if tensor.tensor_type.name != kind:
        raise BlockFormatError(f"{tensor.name}: {tensor.tensor_type.name}, this converter reads {kind}")
    rows = int(tensor.shape[1])
    if int(tensor.shape[0]) % BLOCK:
        raise BlockFormatError(f"{tensor.name}: rows of {int(tensor.shape[0])} are not whole blocks of {BLOCK}")
    return np.asarray(tensor.data, dtype=np.uint8).reshape(rows, int(tensor.shape[0]) // BLOCK, width)


def split_q4_1(tensor: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed nibbles for MatMulNBits [N, K/32, 16], scales d [N*K/32], remainder m + 8d [K/32, N])."""
    raw = _blocks(tensor, "Q4_1", _Q4_1_BYTES)
    scale = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    minimum = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = raw[..., 4:]
    # ggml: element j of a block is the low nibble of byte j (j < 16), element j + 16 its high nibble;
    # MatMulNBits: element 2i is the low nibble of byte i, element 2i + 1 its high nibble
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    remainder = (minimum + 8.0 * scale).T.astype(np.float32)
    return np.ascontiguousarray(packed), scale.reshape(-1), np.ascontiguousarray(remainder)


def split_q8_0(tensor: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values [rows, width], per-block scales [rows, width/32]) of a Q8_0 table."""
    raw = _blocks(tensor, "Q8_0", _Q8_0_BYTES)
    scale = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    values = raw[..., 2:].copy().view(np.int8).reshape(raw.shape[0], -1)
    return values, scale


def dequantize_rows(values: np.ndarray, scales: np.ndarray, ids: np.ndarray | list[int]) -> np.ndarray:
    """Rows ``ids`` of a Q8_0 table as float32 (the embedding lookup)."""
    rows = np.asarray(values[ids], dtype=np.float32)
    blocks = rows.reshape(rows.shape[0], -1, BLOCK) * np.asarray(scales[ids], dtype=np.float32)[..., None]
    return blocks.reshape(rows.shape)


def dequantize_q4_1(tensor: Any) -> np.ndarray:
    """A Q4_1 weight as float32 [N, K]: ``d*q + m`` per block of 32."""
    raw = _blocks(tensor, "Q4_1", _Q4_1_BYTES)
    scale = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    minimum = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    values = np.concatenate([raw[..., 4:] & 0x0F, raw[..., 4:] >> 4], axis=-1).astype(np.float32)
    return (values * scale[..., None] + minimum[..., None]).reshape(raw.shape[0], -1)


def int8_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, K] float weights as int8 [K, N] with one symmetric scale per output column, in 7 bits
    (-63..63): x86 CPUs without VNNI multiply u8 x s8 with a 16-bit pairwise sum that saturates
    past 32,767, and 255 * 127 * 2 passes it; 255 * 63 * 2 does not (onnxruntime's "reduce range").
    On the end-of-turn log-probability 7 bits moved it as much as 8 did (within ~1 nat of float)."""
    scale = np.abs(weight).max(axis=1) / 63.0
    scale[scale == 0] = 1.0
    values = np.clip(np.rint(weight / scale[:, None]), -63, 63).astype(np.int8)
    return np.ascontiguousarray(values.T), scale.astype(np.float32)
