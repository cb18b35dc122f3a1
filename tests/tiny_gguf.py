"""A tiny random llama GGUF laid out as SmolLM2-135M-Instruct's Q4_1 file is, for converter tests.

Same keys, same tensor names, same block formats (Q4_1 linears, a Q8_0 embedding tied with the
output layer, F32 norms) and a byte-level BPE vocabulary with ChatML control tokens, but 2 layers
of width 64 (4 query heads, 2 key/value heads of 16), so a test builds and exports it in well
under a second and never needs the 98 MB real file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Quant
from gguf.quants import quantize
from tokenizers import pre_tokenizers

CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Words whose BPE merges the vocabulary carries (bare and after a space), so encoding merges bytes.
WORDS = ["hello", "world", "the", "end", "turn"]
#: A merge of two digits: SmolLM2's pre-tokenizer splits digits first, so it must never apply.
DIGIT_MERGE = ("1", "2")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_CONTROL, _NORMAL = 3, 1  # llama.cpp token types


@dataclass(frozen=True)
class TinyLlama:
    """What to write; the defaults are a model the converter accepts, the options the ones it refuses."""

    layers: int = 2
    width: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    context: int = 64
    rope_base: float = 100000.0
    norm_eps: float = 1e-5
    seed: int = 0
    architecture: str = "llama"
    rope_dimensions: int | None = None  # None: the head size, as in SmolLM2
    untied_output: bool = False
    #: tensor name -> quant type, replacing the usual one (Q4_1 linears, Q8_0 embedding)
    types: dict[str, Quant] = field(default_factory=dict)


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): control tokens, the 256 byte symbols, then the merges' products."""
    tokens = [*CONTROL_TOKENS, *sorted(pre_tokenizers.ByteLevel.alphabet())]
    merges: list[str] = []
    for word in [*WORDS, *("Ġ" + word for word in WORDS)]:
        for end in range(2, len(word) + 1):
            left, right = word[: end - 1], word[end - 1]
            if word[:end] not in tokens:
                merges.append(f"{left} {right}")
                tokens.append(word[:end])
    merges.append(" ".join(DIGIT_MERGE))
    tokens.append("".join(DIGIT_MERGE))
    kinds = [_CONTROL if token in CONTROL_TOKENS else _NORMAL for token in tokens]
    return tokens, kinds, merges


def write_tiny_llama(path: Path, spec: TinyLlama = TinyLlama()) -> Path:
    """Write ``spec`` as a GGUF at ``path`` (random weights from ``spec.seed``)."""
    rng = np.random.default_rng(spec.seed)
    tokens, kinds, merges = vocabulary()
    head = spec.width // spec.heads
    writer = gguf.GGUFWriter(str(path), spec.architecture)
    writer.add_block_count(spec.layers)
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.width)
    writer.add_feed_forward_length(spec.ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_freq_base(spec.rope_base)
    writer.add_layer_norm_rms_eps(spec.norm_eps)
    writer.add_rope_dimension_count(spec.rope_dimensions or head)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(kinds)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_chat_template(CHAT_TEMPLATE)

    def add(name: str, weight: np.ndarray, usual: Quant) -> None:
        kind = spec.types.get(name, usual)
        if kind == Quant.F32:
            writer.add_tensor(name, weight.astype(np.float32))
        else:
            writer.add_tensor(name, quantize(weight.astype(np.float32), kind), raw_dtype=kind)

    def linear(rows: int, columns: int, scale: float) -> np.ndarray:
        # per-row offsets, so the blocks' minimums (Q4_1's m) differ from -8d and matter
        return rng.normal(0.0, scale, (rows, columns)) + rng.normal(0.0, scale / 2, (rows, 1))

    vocab, kv_width = len(tokens), spec.kv_heads * head
    add("token_embd.weight", rng.normal(0.0, 0.5, (vocab, spec.width)), Quant.Q8_0)
    for layer in range(spec.layers):
        block = f"blk.{layer}."
        add(block + "attn_norm.weight", 1.0 + rng.normal(0.0, 0.1, spec.width), Quant.F32)
        add(block + "attn_q.weight", linear(spec.width, spec.width, 0.1), Quant.Q4_1)
        add(block + "attn_k.weight", linear(kv_width, spec.width, 0.1), Quant.Q4_1)
        add(block + "attn_v.weight", linear(kv_width, spec.width, 0.2), Quant.Q4_1)
        add(block + "attn_output.weight", linear(spec.width, spec.width, 0.1), Quant.Q4_1)
        add(block + "ffn_norm.weight", 1.0 + rng.normal(0.0, 0.1, spec.width), Quant.F32)
        add(block + "ffn_gate.weight", linear(spec.ffn, spec.width, 0.1), Quant.Q4_1)
        add(block + "ffn_up.weight", linear(spec.ffn, spec.width, 0.1), Quant.Q4_1)
        add(block + "ffn_down.weight", linear(spec.width, spec.ffn, 0.1), Quant.Q4_1)
    add("output_norm.weight", 1.0 + rng.normal(0.0, 0.1, spec.width), Quant.F32)
    if spec.untied_output:
        add("output.weight", rng.normal(0.0, 0.5, (vocab, spec.width)), Quant.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
