"""The GGUF -> onnxruntime converter (kitt_stt/models/llama_export.py) on a tiny random llama.

The graph is checked against an independent float64 forward of the same weights, dequantized by
the ``gguf`` package rather than by ``gguf_blocks``, so a wrong nibble order, a lost Q4_1 minimum
or a rotary embedding on the wrong pairs shows up as wrong log-probabilities.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as Quant
from gguf.quants import dequantize, quantize
from tokenizers import Tokenizer

from kitt_stt.models import gguf_blocks
from kitt_stt.models.llama_export import (
    CONFIG_FILE,
    EMBEDDING_FILE,
    EMBEDDING_SCALES_FILE,
    GRAPH_FILE,
    TOKENIZER_FILE,
    ExportError,
    build_graph,
    export,
)
from tests.tiny_gguf import CONTROL_TOKENS, DIGIT_MERGE, TinyLlama, write_tiny_llama

SPEC = TinyLlama()
#: Token ids of a short prompt (the 3 control tokens come first in the tiny vocabulary).
PROMPT = [1, 120, 77, 230, 5, 260, 2, 1, 41, 99, 288, 17, 64, 150]
#: Max |graph - float64 reference| over the vocabulary's log-probabilities (a spread of ~23 nats).
#: The graph quantizes activations to int8 (per token into q|k|v and gate|up, per block of 32 in
#: MatMulNBits): 0.17-0.29 measured over 8 seeds of the tiny model. Each bug the module docstring
#: names, put into the converter by hand, moved them by 10 nats or more.
LOG_PROB_TOLERANCE = 0.6


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def exported(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export")
    export(tiny_gguf, out)
    return out


@pytest.fixture(scope="module")
def weights(tiny_gguf: Path) -> dict[str, np.ndarray]:
    return float_weights(tiny_gguf)


@pytest.fixture(scope="module")
def session(exported: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(exported / GRAPH_FILE), options, providers=["CPUExecutionProvider"])


def empty_cache() -> dict[str, np.ndarray]:
    empty = np.zeros((1, SPEC.kv_heads, 0, SPEC.width // SPEC.heads), np.float32)
    return {f"past_{kind}_{layer}": empty for layer in range(SPEC.layers) for kind in ("key", "value")}


def run(session: ort.InferenceSession, exported: Path, ids: list[int], past: dict[str, np.ndarray]) -> dict[str, Any]:
    """Feed ``ids`` after the ``past`` cache, their embedding rows read from the exported int8 table."""
    values = np.load(exported / EMBEDDING_FILE, mmap_mode="r")
    scales = np.load(exported / EMBEDDING_SCALES_FILE, mmap_mode="r")
    total = int(next(iter(past.values())).shape[2]) + len(ids)
    feeds = {
        "inputs_embeds": gguf_blocks.dequantize_rows(values, scales, ids)[None],
        "seqlens_k": np.array([total - 1], np.int32),
        "total_sequence_length": np.array([total], np.int32),
        **past,
    }
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def presents_as_past(outputs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name.replace("present_", "past_"): value for name, value in outputs.items() if name.startswith("present_")}


def float_weights(path: Path) -> dict[str, np.ndarray]:
    """Every tensor as float64 [rows, columns], dequantized by the gguf package itself."""
    weights = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        shape = [int(size) for size in reversed(tensor.shape)]
        weights[tensor.name] = dequantize(tensor.data, tensor.tensor_type).astype(np.float64).reshape(shape)
    return weights


def reference_log_probs(weights: dict[str, np.ndarray], ids: list[int], adjacent_pairs: bool = True) -> np.ndarray:
    """llama in float64: RMSNorm, rotary on adjacent pairs, grouped-query attention, SwiGLU, tied output.

    ``adjacent_pairs=False`` rotates dimension i with i + head/2 (Hugging Face's layout) instead.
    """
    head = SPEC.width // SPEC.heads
    half, steps = head // 2, len(ids)

    def rms(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + SPEC.norm_eps) * weight

    def rotate(x: np.ndarray) -> np.ndarray:  # [heads, steps, head]
        angle = np.arange(steps)[:, None] * SPEC.rope_base ** (-np.arange(0, head, 2) / head)
        first, second = (
            (slice(0, None, 2), slice(1, None, 2)) if adjacent_pairs else (slice(0, half), slice(half, None))
        )
        out = np.empty_like(x)
        out[..., first] = x[..., first] * np.cos(angle) - x[..., second] * np.sin(angle)
        out[..., second] = x[..., first] * np.sin(angle) + x[..., second] * np.cos(angle)
        return out

    def heads(x: np.ndarray, count: int) -> np.ndarray:
        return x.reshape(steps, count, head).transpose(1, 0, 2)

    x = weights["token_embd.weight"][ids]
    future = np.triu(np.full((steps, steps), -np.inf), 1)
    for layer in range(SPEC.layers):
        w = {name.split(".", 2)[2]: value for name, value in weights.items() if name.startswith(f"blk.{layer}.")}
        h = rms(x, w["attn_norm.weight"])
        query = rotate(heads(h @ w["attn_q.weight"].T, SPEC.heads))
        group = SPEC.heads // SPEC.kv_heads
        key = np.repeat(rotate(heads(h @ w["attn_k.weight"].T, SPEC.kv_heads)), group, axis=0)
        value = np.repeat(heads(h @ w["attn_v.weight"].T, SPEC.kv_heads), group, axis=0)
        scores = query @ key.transpose(0, 2, 1) / np.sqrt(head) + future
        attention = np.exp(scores - scores.max(-1, keepdims=True))
        attention /= attention.sum(-1, keepdims=True)
        x = x + (attention @ value).transpose(1, 0, 2).reshape(steps, SPEC.width) @ w["attn_output.weight"].T
        h = rms(x, w["ffn_norm.weight"])
        gate, up = h @ w["ffn_gate.weight"].T, h @ w["ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T
    logits = rms(x[-1], weights["output_norm.weight"]) @ weights["token_embd.weight"].T
    return logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()


def test_log_probs_match_a_float64_forward_of_the_same_weights(
    weights: dict[str, np.ndarray], exported: Path, session: ort.InferenceSession
) -> None:
    reference = reference_log_probs(weights, PROMPT)
    graph = run(session, exported, PROMPT, empty_cache())["log_probs"][0]
    assert graph.shape == reference.shape
    assert reference.max() - reference.min() > 5.0  # a peaked distribution, not a flat one a bug could also match
    assert np.abs(graph - reference).max() < LOG_PROB_TOLERANCE
    assert int(graph.argmax()) == int(reference.argmax())
    # the prompt is long enough for the rotary layout to matter: the other one is far outside the tolerance
    other_layout = reference_log_probs(weights, PROMPT, adjacent_pairs=False)
    assert np.abs(graph - other_layout).max() > 5 * LOG_PROB_TOLERANCE


@pytest.mark.parametrize("cut", [9, len(PROMPT) - 1], ids=["then-several", "then-one"])
def test_a_prefix_cache_gives_the_same_answer_as_the_whole_prompt(
    exported: Path, session: ort.InferenceSession, cut: int
) -> None:
    """The prompt's first ``cut`` tokens, then the rest with their present as past: the whole prompt's outputs.

    One new token takes GroupQueryAttention's decoding path, several its prompt path (measured: ~1e-5 apart
    and bit-equal respectively).
    """
    whole = run(session, exported, PROMPT, empty_cache())
    first = run(session, exported, PROMPT[:cut], empty_cache())
    assert first["present_key_0"].shape == (1, SPEC.kv_heads, cut, SPEC.width // SPEC.heads)
    rest = run(session, exported, PROMPT[cut:], presents_as_past(first))
    assert rest.keys() == whole.keys()
    for name, value in whole.items():
        np.testing.assert_allclose(rest[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_export_writes_the_embedding_table_and_the_config(weights: dict[str, np.ndarray], exported: Path) -> None:
    config = json.loads((exported / CONFIG_FILE).read_text())
    assert config["end_token_id"] == CONTROL_TOKENS.index("<|im_end|>")
    assert "<|im_start|>" in config["chat_template"]
    assert (config["layers"], config["kv_heads"], config["head_size"]) == (SPEC.layers, SPEC.kv_heads, 16)
    table = weights["token_embd.weight"]
    values, scales = np.load(exported / EMBEDDING_FILE), np.load(exported / EMBEDDING_SCALES_FILE)
    ids = [0, 7, len(table) - 1]
    np.testing.assert_array_equal(gguf_blocks.dequantize_rows(values, scales, ids), table[ids].astype(np.float32))


def test_tokenizer_round_trips_text_and_keeps_control_tokens_whole(exported: Path) -> None:
    tokenizer = Tokenizer.from_file(str(exported / TOKENIZER_FILE))
    text = "hello world, the end of the turn?\n  Ünïcödé 🚗 and 1234 tabs\tok"
    encoded = tokenizer.encode(text)
    assert tokenizer.decode(encoded.ids) == text
    assert tokenizer.encode("hello").ids == [tokenizer.token_to_id("hello")]  # the merges apply
    assert len(tokenizer.encode("".join(DIGIT_MERGE)).ids) == 2  # digits one by one, as SmolLM2 splits them
    chat = "<|im_start|>user\nhello<|im_end|>\n"
    ids = tokenizer.encode(chat).ids
    for index, token in enumerate(CONTROL_TOKENS):
        assert tokenizer.token_to_id(token) == index
    assert ids[0] == 1 and ids.count(2) == 1 and 2 in ids[:-1]
    assert tokenizer.decode(ids, skip_special_tokens=False) == chat


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (TinyLlama(architecture="qwen2"), ExportError, "architecture 'qwen2', expected 'llama'"),
        (TinyLlama(untied_output=True), ExportError, "untied output layer"),
        (TinyLlama(rope_dimensions=8), ExportError, "partial rotary"),
        (TinyLlama(types={"blk.1.attn_v.weight": Quant.Q8_0}), gguf_blocks.BlockFormatError, "attn_v.weight: Q8_0"),
        (TinyLlama(types={"blk.0.ffn_down.weight": Quant.F16}), gguf_blocks.BlockFormatError, "ffn_down.weight: F16"),
        (TinyLlama(types={"token_embd.weight": Quant.Q4_1}), gguf_blocks.BlockFormatError, "reads Q8_0"),
    ],
    ids=["architecture", "untied-output", "partial-rope", "q8-linear", "f16-linear", "q4-embedding"],
)
def test_refuses_models_it_cannot_convert(
    tmp_path: Path, spec: TinyLlama, error: type[Exception], message: str
) -> None:
    path = write_tiny_llama(tmp_path / "model.gguf", spec)
    with pytest.raises(error, match=message):
        build_graph(gguf.GGUFReader(str(path)))


def test_q4_1_blocks_match_the_gguf_package(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    weight = rng.normal(0.0, 1.0, (24, 96)) + rng.normal(0.0, 2.0, (24, 1))
    tensor = _quantized_tensor(tmp_path, weight, Quant.Q4_1)
    expected = dequantize(tensor.data, Quant.Q4_1).reshape(24, 96)
    np.testing.assert_array_equal(gguf_blocks.dequantize_q4_1(tensor), expected)
    packed, scales, remainder = gguf_blocks.split_q4_1(tensor)
    # MatMulNBits' reading of the parts: element 2i low nibble of byte i, 2i+1 high; w = d*(q-8) + (m+8d)
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(24, 3, 32).astype(np.float64)
    rebuilt = (nibbles - 8) * scales.reshape(24, 3, 1) + remainder.T[..., None]
    np.testing.assert_allclose(rebuilt.reshape(24, 96), expected, rtol=0, atol=1e-5)


def test_q8_0_rows_match_the_gguf_package(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    table = rng.normal(0.0, 0.5, (40, 64))
    tensor = _quantized_tensor(tmp_path, table, Quant.Q8_0)
    expected = dequantize(tensor.data, Quant.Q8_0).reshape(40, 64)
    values, scales = gguf_blocks.split_q8_0(tensor)
    assert values.dtype == np.int8 and scales.shape == (40, 2)
    ids = [3, 0, 39, 3]
    np.testing.assert_array_equal(gguf_blocks.dequantize_rows(values, scales, ids), expected[ids])


def _quantized_tensor(directory: Path, weight: np.ndarray, kind: Quant) -> Any:
    """``weight`` quantized by the gguf package, written to a GGUF and read back as a reader tensor."""
    path = directory / "one.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", quantize(weight.astype(np.float32), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(str(path)).tensors[0]
