"""Small random-weight models in SenseVoice's sherpa-onnx format, for engine equivalence tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kitt_stt.models.tone_model import LANGUAGE_IDS, WITH_ITN_ID, WITHOUT_ITN_ID

FEATURE_DIM = 560


def build_random_model(directory: Path, seed: int, vocab: int = 40, hidden: int = 32) -> list[str]:
    """x -> tanh(x W1) W2 per frame, plus four prefix frames from the language and ITN inputs.

    Features are normalised by random CMVN first so that logits vary from frame to frame.
    """
    rng = np.random.default_rng(seed)
    tokens = ["<blk>"] + [f"▁w{i}" if i % 3 == 0 else f"t{i}" for i in range(1, vocab)]
    w1 = rng.normal(0, 0.05, (FEATURE_DIM, hidden)).astype(np.float32)
    w2 = rng.normal(0, 1.0, (hidden, vocab)).astype(np.float32)
    lang_table = rng.normal(0, 3, (16, vocab)).astype(np.float32)
    fixed = rng.normal(0, 3, (2, vocab)).astype(np.float32)
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w1"], ["h"]),
        n("Tanh", ["h"], ["ht"]),
        n("MatMul", ["ht", "w2"], ["body"]),
        n("Gather", ["lang_table", "language"], ["lang_row"]),
        n("Gather", ["lang_table", "text_norm"], ["itn_row"]),
        n("Unsqueeze", ["lang_row", "one"], ["lang_frame"]),
        n("Unsqueeze", ["itn_row", "one"], ["itn_frame"]),
        n("Shape", ["x"], ["x_shape"]),
        n("Slice", ["x_shape", "zero", "one"], ["batch"]),
        n("Concat", ["batch", "fixed_tail"], ["fixed_shape"], axis=0),
        n("Expand", ["fixed", "fixed_shape"], ["fixed_frames"]),
        n("Concat", ["lang_frame", "fixed_frames", "itn_frame", "body"], ["logits"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(lang_table, "lang_table"), numpy_helper.from_array(fixed[None], "fixed"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2, vocab], np.int64), "fixed_tail"),
    ]
    graph = helper.make_graph(nodes, "random_sense_voice", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", FEATURE_DIM]),
        helper.make_tensor_value_info("x_length", TensorProto.INT32, ["N"]),
        helper.make_tensor_value_info("language", TensorProto.INT32, ["N"]),
        helper.make_tensor_value_info("text_norm", TensorProto.INT32, ["N"]),
    ], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "T4", vocab])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = {
        "vocab_size": str(vocab), "lfr_window_size": "7", "lfr_window_shift": "6", "normalize_samples": "0",
        "with_itn": str(WITH_ITN_ID), "without_itn": str(WITHOUT_ITN_ID),
        **{f"lang_{name}": str(value) for name, value in LANGUAGE_IDS.items()},
        "neg_mean": ",".join(f"{v:.4f}" for v in -rng.uniform(5, 12, FEATURE_DIM)),
        "inv_stddev": ",".join(f"{v:.4f}" for v in rng.uniform(0.2, 0.5, FEATURE_DIM)),
    }
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))
    (directory / "tokens.txt").write_text("".join(f"{token} {index}\n" for index, token in enumerate(tokens)))
    return tokens
