"""A random-weight model with SenseVoice-Small's real architecture, for CPU benchmarks.

Real SenseVoice weights cannot be downloaded on the development machines, but its compute cost
can be reproduced exactly: this builds the same network (SANM encoder: 1 input layer 560->512
plus 49 layers of 512, 4 heads, FSMN memory with kernel 11, FFN 2048; 20 "tp" layers; CTC
projection to 25,055 tokens; about 234 M parameters) with random weights, exports it in the
sherpa-onnx SenseVoice format (same inputs, outputs and metadata) and quantises it to int8.
Its text is meaningless; its speed is representative.

torch is needed only here, at build time (``pip install torch``); inference never needs it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.onnx_metadata import set_file_metadata
from kitt_stt.models.tone_model import LANGUAGE_IDS, WITH_ITN_ID, WITHOUT_ITN_ID

VOCAB = 25055
FEATURE_DIM = 560
MODEL_DIM = 512
HEADS = 4
FFN_DIM = 2048
KERNEL = 11
LAYERS = 49
TP_LAYERS = 20
QUERY_IDS = 16  # embedding rows for language / event / emotion / text-norm queries


def _torch_modules():
    try:
        import torch
        from torch import nn
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError("building sensevoice-bench needs torch (CPU is enough): pip install torch") from None

    class SanmAttention(nn.Module):
        """Multi-head self-attention plus an FSMN memory (depthwise conv over the values)."""

        def __init__(self, in_dim: int) -> None:
            super().__init__()
            self.qkv = nn.Linear(in_dim, 3 * MODEL_DIM)
            self.out = nn.Linear(MODEL_DIM, MODEL_DIM)
            self.fsmn = nn.Conv1d(MODEL_DIM, MODEL_DIM, KERNEL, padding=KERNEL // 2, groups=MODEL_DIM, bias=False)

        def forward(self, x, mask, key_bias):
            batch, frames, _ = x.shape
            q, k, v = self.qkv(x).split(MODEL_DIM, dim=-1)
            v_masked = v * mask
            memory = self.fsmn(v_masked.transpose(1, 2)).transpose(1, 2) + v_masked
            memory = memory * mask

            def heads(t):
                return t.view(batch, frames, HEADS, MODEL_DIM // HEADS).transpose(1, 2)

            scores = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(MODEL_DIM // HEADS) + key_bias
            context = (scores.softmax(dim=-1) @ heads(v)).transpose(1, 2).reshape(batch, frames, MODEL_DIM)
            return self.out(context) + memory

    class SanmLayer(nn.Module):
        def __init__(self, in_dim: int) -> None:
            super().__init__()
            self.residual = in_dim == MODEL_DIM
            self.norm1 = nn.LayerNorm(in_dim)
            self.attention = SanmAttention(in_dim)
            self.norm2 = nn.LayerNorm(MODEL_DIM)
            self.ffn = nn.Sequential(nn.Linear(MODEL_DIM, FFN_DIM), nn.ReLU(), nn.Linear(FFN_DIM, MODEL_DIM))

        def forward(self, x, mask, key_bias):
            attended = self.attention(self.norm1(x), mask, key_bias)
            x = x + attended if self.residual else attended
            return x + self.ffn(self.norm2(x))

    class SenseVoiceShaped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.queries = nn.Embedding(QUERY_IDS, FEATURE_DIM)
            self.first = SanmLayer(FEATURE_DIM)
            self.layers = nn.ModuleList(SanmLayer(MODEL_DIM) for _ in range(LAYERS))
            self.after_norm = nn.LayerNorm(MODEL_DIM)
            self.tp_layers = nn.ModuleList(SanmLayer(MODEL_DIM) for _ in range(TP_LAYERS))
            self.tp_norm = nn.LayerNorm(MODEL_DIM)
            self.ctc = nn.Linear(MODEL_DIM, VOCAB)

        def forward(self, x, x_length, language, text_norm):
            batch = x.shape[0]
            event_emotion = torch.tensor([1, 2], dtype=torch.long).expand(batch, 2)
            prefix = torch.cat([self.queries(language.long()).unsqueeze(1), self.queries(event_emotion),
                                self.queries(text_norm.long()).unsqueeze(1)], dim=1)
            x = torch.cat([prefix, x], dim=1) * math.sqrt(MODEL_DIM)
            frames = x.shape[1]
            positions = torch.arange(1, frames + 1, dtype=torch.float32).unsqueeze(1)
            rates = torch.exp(torch.arange(FEATURE_DIM // 2, dtype=torch.float32)
                              * -(math.log(10000.0) / (FEATURE_DIM / 2 - 1)))
            x = x + torch.cat([torch.sin(positions * rates), torch.cos(positions * rates)], dim=-1)
            valid = torch.arange(frames).unsqueeze(0) < (x_length.long() + 4).unsqueeze(1)
            mask = valid.unsqueeze(-1).to(x.dtype)
            key_bias = (~valid).to(x.dtype).unsqueeze(1).unsqueeze(1) * -1e4
            x = self.first(x, mask, key_bias)
            for layer in self.layers:
                x = layer(x, mask, key_bias)
            x = self.after_norm(x)
            for layer in self.tp_layers:
                x = layer(x, mask, key_bias)
            return self.ctc(self.tp_norm(x))

    return torch, SenseVoiceShaped


def tokens() -> list[str]:
    specials = {0: "<unk>", 1: "<s>", 2: "</s>", 24884: "<|zh|>", 24885: "<|en|>", 24888: "<|yue|>",
                24892: "<|ja|>", 24896: "<|ko|>", 24993: "<|nospeech|>", 25001: "<|NEUTRAL|>", 25004: "<|Speech|>",
                25016: "<|withitn|>", 25017: "<|woitn|>"}
    return [specials.get(index, f"▁t{index}" if index % 4 == 0 else f"t{index}") for index in range(VOCAB)]


def metadata(seed: int = 0) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    dim = FEATURE_DIM
    return {
        "model_type": "sense_voice_ctc",
        "model_author": "kitt-stt sensevoice-bench (random weights, SenseVoice-Small architecture)",
        "vocab_size": str(VOCAB), "lfr_window_size": "7", "lfr_window_shift": "6", "normalize_samples": "0",
        "with_itn": str(WITH_ITN_ID), "without_itn": str(WITHOUT_ITN_ID),
        **{f"lang_{name}": str(value) for name, value in LANGUAGE_IDS.items()},
        "neg_mean": ",".join(f"{v:.5f}" for v in -rng.uniform(8.0, 14.0, dim)),
        "inv_stddev": ",".join(f"{v:.5f}" for v in rng.uniform(0.2, 0.4, dim)),
    }


def build_sensevoice_bench(out_dir: Path, seed: int = 0) -> dict[str, str]:
    """Write ``model.onnx`` (fp32), ``model.int8.onnx`` and ``tokens.txt``; return sha256 of each."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch, model_class = _torch_modules()
    torch.manual_seed(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = model_class().eval()
    count = sum(parameter.numel() for parameter in model.parameters())
    print(f"  {count / 1e6:.1f} M parameters", file=sys.stderr, flush=True)
    example = (torch.zeros(1, 20, FEATURE_DIM), torch.tensor([20], dtype=torch.int32),
               torch.tensor([0], dtype=torch.int32), torch.tensor([14], dtype=torch.int32))
    fp32 = out_dir / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            model, example, str(fp32), input_names=["x", "x_length", "language", "text_norm"],
            output_names=["logits"], opset_version=17, dynamo=False,
            dynamic_axes={"x": {0: "N", 1: "T"}, "x_length": {0: "N"}, "language": {0: "N"},
                          "text_norm": {0: "N"}, "logits": {0: "N", 1: "T4"}},
        )
    set_file_metadata(fp32, metadata(seed))
    int8 = out_dir / "model.int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    set_file_metadata(int8, metadata(seed))
    (out_dir / "tokens.txt").write_text("".join(f"{token} {index}\n" for index, token in enumerate(tokens())))
    return {name: sha256_file(out_dir / name) for name in ("model.onnx", "model.int8.onnx", "tokens.txt")}
