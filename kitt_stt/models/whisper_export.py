"""Convert a CTranslate2 Whisper model into the ONNX pair sherpa-onnx's Whisper recognizer loads.

sherpa-onnx runs Whisper as two graphs:

- encoder: ``mel`` (N, n_mels, T), T up to 3000 frames -> ``n_layer_cross_k`` and
  ``n_layer_cross_v`` (layers, N, T/2, d): the encoder output already projected by every decoder
  layer's cross-attention key/value weights, so the decoder never recomputes them;
- decoder: ``tokens`` (N, n), ``in_n_layer_self_k_cache`` / ``in_n_layer_self_v_cache`` (layers,
  N, n_text_ctx, d), the cross k/v and ``offset`` (1,), the number of tokens already in the
  caches -> ``logits`` (N, n, vocab), the updated caches, and ``cross_qk`` (N, heads, n, T/2): the
  alignment heads' raw cross-attention scores (``q k^T / sqrt(d_head)``, before the softmax), from
  which ``asr/whisper_timing.py`` times words. The heads are the model's own (CTranslate2's
  ``config.json`` lists them; without one, every head of the last half of the layers, as Whisper
  itself falls back to); sherpa-onnx reads the first three outputs and ignores the fourth.

The encoder's metadata carries what the recognizer needs to drive decoding (dimensions and special
token ids, language tokens and codes). The graphs are rebuilt here from the weights with torch
(CPU) and exported; the decoder is dynamically quantised to int8, the encoder kept in float32
(see ``convert_whisper``).

torch is needed only for this conversion (the ``convert`` extra); inference needs onnxruntime.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kitt_stt.logs import root_info_silenced
from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.ct2_reader import Ct2Model, read_ct2_model
from kitt_stt.models.onnx_metadata import set_file_metadata
from kitt_stt.models.whisper_vocab import WhisperVocabulary, read_vocabulary

LAYER_NORM_EPS = 1e-5


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "converting whisper-base needs torch (CPU is enough): pip install 'kitt-stt[convert]'"
        ) from None
    return torch


def _count_layers(model: Ct2Model, prefix: str) -> int:
    count = 0
    while f"{prefix}/layer_{count}/ffn/linear_0/weight" in model.variables:
        count += 1
    return count


def _build_modules(model: Ct2Model, alignment_heads: list[tuple[int, int]] | None = None
                   ) -> tuple[Any, Any, dict[str, int]]:
    """Return (encoder, decoder, dims) as torch modules holding the float32 weights; the decoder
    also outputs the raw cross-attention scores of ``alignment_heads`` ((layer, head) pairs;
    None: every head of the last half of the layers)."""
    torch = _torch()
    from torch import nn
    from torch.nn import functional

    def param(name: str) -> Any:
        return nn.Parameter(torch.from_numpy(model.tensor(name).copy()), requires_grad=False)

    def layer_norm(x: Any, prefix: str, owner: Any) -> Any:
        width = int(model.variables[f"{prefix}/gamma"].shape[0])  # a plain int: the exporter needs it static
        return functional.layer_norm(x, (width,), owner.p[f"{prefix}/gamma"], owner.p[f"{prefix}/beta"],
                                     LAYER_NORM_EPS)

    def linear(x: Any, prefix: str, owner: Any) -> Any:
        return functional.linear(x, owner.p[f"{prefix}/weight"], owner.p[f"{prefix}/bias"])

    def attend(q: Any, k: Any, v: Any, heads: int, mask: Any | None = None, scores_out: list[Any] | None = None
               ) -> Any:
        """Scaled dot-product attention, written out so the legacy ONNX exporter sees plain MatMuls;
        ``scores_out`` receives the raw scores (batch, heads, q, k) before the mask and softmax."""
        batch, q_len, width = q.shape
        head_dim = width // heads
        q = q.reshape(batch, q_len, heads, head_dim).transpose(1, 2)
        k = k.reshape(batch, -1, heads, head_dim).transpose(1, 2)
        v = v.reshape(batch, -1, heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (head_dim ** -0.5)
        if scores_out is not None:
            scores_out.append(scores)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, v).transpose(1, 2).reshape(batch, q_len, width)

    encoder_layers = _count_layers(model, "encoder")
    decoder_layers = _count_layers(model, "decoder")
    embedding = model.tensor("decoder/embeddings/weight")
    dims = {
        "n_mels": int(model.variables["encoder/conv1/weight"].shape[1]),
        "n_audio_ctx": int(model.variables["encoder/position_encodings/encodings"].shape[0]),
        "n_audio_state": int(model.variables["encoder/conv1/weight"].shape[0]),
        "n_audio_head": model.scalar("encoder/num_heads"),
        "n_audio_layer": encoder_layers,
        "n_vocab": int(embedding.shape[0]),
        "n_text_ctx": int(model.variables["decoder/position_encodings/encodings"].shape[0]),
        "n_text_state": int(embedding.shape[1]),
        "n_text_head": model.scalar("decoder/num_heads"),
        "n_text_layer": decoder_layers,
    }
    heads = alignment_heads or [(layer, head) for layer in range(decoder_layers // 2, decoder_layers)
                                for head in range(dims["n_text_head"])]

    class Weights(nn.Module):
        def __init__(self, names: list[str]) -> None:
            super().__init__()
            self.p = nn.ParameterDict({name: param(name) for name in names})

    class Encoder(Weights):
        def __init__(self) -> None:
            names = [name for name in model.variables if name.startswith("encoder/") and
                     model.variables[name].dtype.kind == "f"]
            cross = [f"decoder/layer_{i}/attention/linear_1/{part}" for i in range(decoder_layers)
                     for part in ("weight", "bias")]
            super().__init__(names + cross)

        def forward(self, mel: Any) -> tuple[Any, Any]:
            p = self.p
            x = functional.gelu(functional.conv1d(mel, p["encoder/conv1/weight"], p["encoder/conv1/bias"], padding=1))
            x = functional.gelu(functional.conv1d(x, p["encoder/conv2/weight"], p["encoder/conv2/bias"],
                                                  stride=2, padding=1))
            x = x.transpose(1, 2)
            x = x + p["encoder/position_encodings/encodings"][: x.shape[1]]
            for i in range(encoder_layers):
                prefix = f"encoder/layer_{i}"
                h = layer_norm(x, f"{prefix}/self_attention/layer_norm", self)
                q, k, v = linear(h, f"{prefix}/self_attention/linear_0", self).chunk(3, dim=-1)
                x = x + linear(attend(q, k, v, dims["n_audio_head"]), f"{prefix}/self_attention/linear_1", self)
                h = layer_norm(x, f"{prefix}/ffn/layer_norm", self)
                x = x + linear(functional.gelu(linear(h, f"{prefix}/ffn/linear_0", self)), f"{prefix}/ffn/linear_1",
                               self)
            x = layer_norm(x, "encoder/layer_norm", self)
            keys, values = [], []
            for i in range(decoder_layers):
                k, v = linear(x, f"decoder/layer_{i}/attention/linear_1", self).chunk(2, dim=-1)
                keys.append(k)
                values.append(v)
            return torch.stack(keys), torch.stack(values)

    class Decoder(Weights):
        def __init__(self) -> None:
            names = [name for name in model.variables if name.startswith("decoder/") and
                     model.variables[name].dtype.kind == "f" and "/attention/linear_1/" not in name and
                     name != "decoder/projection/weight"]
            super().__init__(names)

        def forward(self, tokens: Any, self_k: Any, self_v: Any, cross_k: Any, cross_v: Any,
                    offset: Any) -> tuple[Any, Any, Any, Any]:
            p = self.p
            start = offset[0]
            count = tokens.shape[1]
            end = start + count
            x = p["decoder/embeddings/weight"][tokens] + p["decoder/position_encodings/encodings"][start:end]
            query_positions = torch.arange(count, dtype=torch.int64) + start
            key_positions = torch.arange(end, dtype=torch.int64)
            future = key_positions.unsqueeze(0) > query_positions.unsqueeze(1)
            mask = torch.zeros(future.shape, dtype=x.dtype).masked_fill(future, float("-inf"))
            new_keys, new_values, cross_scores = [], [], []
            for i in range(decoder_layers):
                prefix = f"decoder/layer_{i}"
                h = layer_norm(x, f"{prefix}/self_attention/layer_norm", self)
                q, k, v = linear(h, f"{prefix}/self_attention/linear_0", self).chunk(3, dim=-1)
                k_all = torch.cat([self_k[i][:, :start], k, self_k[i][:, end:]], dim=1)
                v_all = torch.cat([self_v[i][:, :start], v, self_v[i][:, end:]], dim=1)
                new_keys.append(k_all)
                new_values.append(v_all)
                attended = attend(q, k_all[:, :end], v_all[:, :end], dims["n_text_head"], mask)
                x = x + linear(attended, f"{prefix}/self_attention/linear_1", self)
                h = layer_norm(x, f"{prefix}/attention/layer_norm", self)
                q = linear(h, f"{prefix}/attention/linear_0", self)
                scores: list[Any] = []
                x = x + linear(attend(q, cross_k[i], cross_v[i], dims["n_text_head"], scores_out=scores),
                               f"{prefix}/attention/linear_2", self)
                cross_scores += [scores[0][:, head : head + 1] for layer, head in heads if layer == i]
                h = layer_norm(x, f"{prefix}/ffn/layer_norm", self)
                x = x + linear(functional.gelu(linear(h, f"{prefix}/ffn/linear_0", self)), f"{prefix}/ffn/linear_1",
                               self)
            x = layer_norm(x, "decoder/layer_norm", self)
            logits = torch.matmul(x, p["decoder/embeddings/weight"].transpose(0, 1))
            return logits, torch.stack(new_keys), torch.stack(new_values), torch.cat(cross_scores, dim=1)

    return Encoder().eval(), Decoder().eval(), dims


def read_alignment_heads(config_json: Path) -> list[tuple[int, int]] | None:
    """CTranslate2's ``alignment_heads`` ((layer, head) pairs) from the model's ``config.json``."""
    import json

    if not config_json.is_file():
        return None
    heads = json.loads(config_json.read_text(encoding="utf-8")).get("alignment_heads")
    return [(int(layer), int(head)) for layer, head in heads] if heads else None


def whisper_metadata(dims: dict[str, int], vocab: WhisperVocabulary, model_type: str) -> dict[str, str]:
    """The encoder metadata sherpa-onnx reads (it refuses a model that lacks any of these keys)."""
    special = vocab.special
    return {
        "model_type": model_type,
        "maintainer": "kitt-stt (converted from CTranslate2)",
        **{key: str(value) for key, value in dims.items()},
        "sot": str(special["startoftranscript"]),
        "eot": str(special["endoftext"]),
        "blank_id": str(vocab.tokens.index("Ġ")),
        "translate": str(special["translate"]),
        "transcribe": str(special["transcribe"]),
        "sot_lm": str(special["startoflm"]),
        "sot_prev": str(special["startofprev"]),
        "no_speech": str(special["nocaptions"]),
        "no_timestamps": str(special["notimestamps"]),
        "is_multilingual": "1",
        "sot_index": "0",
        # sot, language (replaced per request), task (replaced per request)
        "sot_sequence": ",".join(str(t) for t in (special["startoftranscript"], vocab.language_ids[0],
                                                   special["transcribe"])),
        "all_language_tokens": ",".join(str(t) for t in vocab.language_ids),
        "all_language_codes": ",".join(vocab.language_codes),
    }


def _export(module: Any, example: tuple[Any, ...], path: Path, inputs: list[str], outputs: list[str],
            dynamic_axes: dict[str, dict[int, str]]) -> None:
    torch = _torch()
    with torch.no_grad():
        torch.onnx.export(module, example, str(path), input_names=inputs, output_names=outputs,
                          opset_version=17, dynamo=False, dynamic_axes=dynamic_axes)


def convert_whisper(model_bin: Path, vocabulary: Path, out_dir: Path, prefix: str = "base",
                    keep_fp32: bool = False) -> dict[str, str]:
    """Write ``{prefix}-encoder.onnx``, ``{prefix}-decoder.int8.onnx`` and ``{prefix}-tokens.txt``;
    the alignment heads come from ``config.json`` beside ``model_bin`` when it has them.

    The encoder stays float32: dynamic int8 quantisation distorts its output (Whisper's encoder
    activations have large outliers; measured against CTranslate2 the cross keys were off by up
    to their own magnitude, and Mandarin commands decoded worse), while the decoder, most of the
    weights, tolerates int8. With ``keep_fp32`` the float32 decoder (``{prefix}-decoder.onnx``)
    stays too, for the reference tests. Returns the sha256 of every file written.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def say(message: str) -> None:  # progress of a ~15 s job, on stderr like pip's
        print(message, file=sys.stderr, flush=True)

    say(f"reading {model_bin.name} ({model_bin.stat().st_size / 1e6:.0f} MB)")
    weights = read_ct2_model(model_bin)  # a broken input is reported as such, with or without torch
    if weights.spec != "WhisperSpec":
        raise ValueError(f"{model_bin}: a {weights.spec} model, not Whisper")
    vocab = read_vocabulary(vocabulary)
    torch = _torch()
    out_dir.mkdir(parents=True, exist_ok=True)
    alignment_heads = read_alignment_heads(model_bin.parent / "config.json")
    encoder, decoder, dims = _build_modules(weights, alignment_heads)
    if dims["n_vocab"] != len(vocab.tokens):
        raise ValueError(f"vocabulary has {len(vocab.tokens)} tokens, the model {dims['n_vocab']}")
    layers, state, ctx = dims["n_text_layer"], dims["n_text_state"], dims["n_text_ctx"]
    fp32 = {part: out_dir / f"{prefix}-{part}.onnx" for part in ("encoder", "decoder")}
    say("exporting the encoder")
    _export(encoder, (torch.zeros(1, dims["n_mels"], 200),), fp32["encoder"], ["mel"],
            ["n_layer_cross_k", "n_layer_cross_v"],
            {"mel": {0: "N", 2: "T"}, "n_layer_cross_k": {1: "N", 2: "T2"}, "n_layer_cross_v": {1: "N", 2: "T2"}})
    say("exporting the decoder")
    cache = torch.zeros(layers, 1, ctx, state)
    cross = torch.zeros(layers, 1, 100, state)
    _export(decoder, (torch.zeros(1, 4, dtype=torch.int64), cache, cache, cross, cross,
                      torch.zeros(1, dtype=torch.int64)),
            fp32["decoder"],
            ["tokens", "in_n_layer_self_k_cache", "in_n_layer_self_v_cache", "n_layer_cross_k", "n_layer_cross_v",
             "offset"],
            ["logits", "out_n_layer_self_k_cache", "out_n_layer_self_v_cache", "cross_qk"],
            {"tokens": {0: "N", 1: "n"}, "in_n_layer_self_k_cache": {1: "N"}, "in_n_layer_self_v_cache": {1: "N"},
             "n_layer_cross_k": {1: "N", 2: "T2"}, "n_layer_cross_v": {1: "N", 2: "T2"},
             "logits": {0: "N", 1: "n"}, "out_n_layer_self_k_cache": {1: "N"}, "out_n_layer_self_v_cache": {1: "N"},
             "cross_qk": {0: "N", 2: "n", 3: "T2"}})
    del encoder, decoder, weights
    metadata = whisper_metadata(dims, vocab, model_type=f"whisper-{prefix}")
    written = {}
    set_file_metadata(fp32["encoder"], metadata)
    written[fp32["encoder"].name] = fp32["encoder"]
    decoder_int8 = out_dir / f"{prefix}-decoder.int8.onnx"
    say("quantising the decoder to int8")
    with root_info_silenced("onnxruntime.quantization"):  # ~60 INFO lines on the root logger otherwise
        quantize_dynamic(str(fp32["decoder"]), str(decoder_int8), weight_type=QuantType.QInt8)
    written[decoder_int8.name] = decoder_int8
    if keep_fp32:
        written[fp32["decoder"].name] = fp32["decoder"]
    else:
        fp32["decoder"].unlink()
    tokens = out_dir / f"{prefix}-tokens.txt"
    tokens.write_text(vocab.tokens_file(), encoding="utf-8")
    written[tokens.name] = tokens
    return {name: sha256_file(path) for name, path in written.items()}
