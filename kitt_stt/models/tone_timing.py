"""The tone model's timing and confidence: what its CTC path says about when and how well.

Two things are added to the emission logits of :mod:`kitt_stt.models.tone_model`, neither of which
changes what greedy decoding reads:

* **Confidence.** At an emission, blank trails the best pitch by a margin that grows with the
  match, ``CONFIDENCE_SLOPE`` x (cosine - ``MATCH_THRESHOLD``), at least ``MIN_BLANK_MARGIN``; so
  the token's posterior is near 1 on a clean burst (cosine ~1) and lower on one masked by noise.
* **Duration.** After a *clear* match (every other pitch scored more than ``CLEAR_MARGIN`` below,
  out of reach of any hotword floor), the token is emitted again on every LFR frame that is voiced
  throughout, until the run of voiced sub-frames ends, so its CTC run spans the burst and the
  burst's end is on the path. Repeats collapse; a frame that is only partly voiced stays blank,
  so two bursts of one pitch 60 ms apart still have a blank between them (an onset frame and the
  previous burst's last fully voiced frame are never adjacent: the gap's six sub-frames would have
  to fit in neither). Ambiguous buzzes, the ones hotwords may tip, keep a one-frame spike, so a
  hotword's choice is never contradicted on the frames after it.

The run's token is carried forward by encoding each onset as ``position * CODE_BASE + token``:
the latest onset within ``SUSTAIN_SUB_FRAMES`` is the maximum over that window (a max-pool), and
its token the remainder.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONFIDENCE_SLOPE = 20.0
MIN_BLANK_MARGIN = 0.5
CLEAR_MARGIN = 0.2  # cosine gap to the second pitch (x SHARPNESS 40 = 8 logits, the hotword floor)
SUSTAIN_SUB_FRAMES = 300  # a burst is held for at most 3 s after its onset
CODE_BASE = 16.0  # > number of pitches + 1


def _const(name: str, value: np.ndarray | list | float | int, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def timing_nodes(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], num_tones: int) -> tuple[str, str]:
    """Append the nodes (see the module docstring) to a graph that has ``similarity``, ``best``,
    ``onset``, ``emit``, ``voiced``, ``position_plus1`` per sub-frame and ``tone_logits``,
    ``any_hit``, ``blank_hit`` per LFR frame; returns the (blank, tone) logits to use instead."""
    n = helper.make_node
    inits += [
        _const("confidence_slope", CONFIDENCE_SLOPE),
        _const("min_margin", MIN_BLANK_MARGIN),
        _const("clear_margin", CLEAR_MARGIN),
        _const("code_base", CODE_BASE),
        _const("zero_f", 0.0),
        _const("two_i", [2], np.int64),
        _const("lift", 40.0),
        _const("tone_numbers", np.arange(1, num_tones + 1)),
    ]
    nodes += [
        # confidence: blank's margin below the token at an emission
        n("Mul", ["best", "emit"], ["best_emit"]),
        n("Reshape", ["best_emit", "shape_emit"], ["frame_best_sub"]),
        n("ReduceMax", ["frame_best_sub"], ["frame_best"], axes=[2], keepdims=1),
        n("Sub", ["frame_best", "threshold"], ["above_threshold"]),
        n("Mul", ["above_threshold", "confidence_slope"], ["margin_raw"]),
        n("Max", ["margin_raw", "min_margin"], ["margin"]),
        n("Sub", ["score", "margin"], ["hit_blank"]),
        n("Mul", ["any_hit", "hit_blank"], ["hit_blank_logit"]),
        n("Mul", ["blank_hit", "score"], ["silent_blank_logit"]),
        n("Add", ["silent_blank_logit", "hit_blank_logit"], ["blank_logit"]),
        # the latest onset's token (0: none, or not a clear match), per sub-frame
        n("TopK", ["similarity", "two_i"], ["top2", "top2_index"], axis=-1),
        n("Slice", ["top2", "zero_i", "one_i", "axis2"], ["first_sim"]),
        n("Slice", ["top2", "one_i", "two_i", "axis2"], ["second_sim"]),
        n("Sub", ["first_sim", "second_sim"], ["lead3"]),
        n("Squeeze", ["lead3", "axis2"], ["lead"]),
        n("Greater", ["lead", "clear_margin"], ["clear_b"]),
        n("Cast", ["clear_b"], ["clear"], to=TensorProto.FLOAT),
        n("ArgMax", ["similarity"], ["best_index"], axis=2, keepdims=0),
        n("Cast", ["best_index"], ["best_index_f"], to=TensorProto.FLOAT),
        n("Add", ["best_index_f", "one_f"], ["token_number"]),
        n("Mul", ["emit", "clear"], ["held"]),
        n("Mul", ["held", "token_number"], ["held_token"]),
        n("Mul", ["position_plus1", "code_base"], ["position_code"]),
        n("Add", ["position_code", "held_token"], ["code_any"]),
        n("Mul", ["code_any", "onset"], ["code"]),
        n("Unsqueeze", ["code", "one_i"], ["code_c"]),
        n("MaxPool", ["code_c"], ["latest_c"], kernel_shape=[SUSTAIN_SUB_FRAMES],
          pads=[SUSTAIN_SUB_FRAMES - 1, 0], strides=[1]),
        n("Squeeze", ["latest_c", "one_i"], ["latest"]),
        n("Mod", ["latest", "code_base"], ["run_token"], fmod=1),
        # frames voiced throughout, after (not at) an emission, of a run with a held token
        n("Reshape", ["voiced", "shape_emit"], ["frame_voiced"]),
        n("ReduceMin", ["frame_voiced"], ["fully_voiced"], axes=[2], keepdims=1),
        n("Reshape", ["run_token", "shape_emit"], ["frame_run_tokens"]),
        n("Slice", ["frame_run_tokens", "zero_i", "one_i", "axis2"], ["frame_token"]),
        n("Greater", ["frame_token", "zero_f"], ["has_token_b"]),
        n("Cast", ["has_token_b"], ["has_token"], to=TensorProto.FLOAT),
        n("Mul", ["fully_voiced", "has_token"], ["voiced_token"]),
        n("Mul", ["voiced_token", "blank_hit"], ["sustain"]),
        n("Equal", ["frame_token", "tone_numbers"], ["sustain_hot_b"]),
        n("Cast", ["sustain_hot_b"], ["sustain_hot"], to=TensorProto.FLOAT),
        n("Mul", ["sustain_hot", "sustain"], ["sustain_mask"]),
        n("Mul", ["sustain_mask", "lift"], ["sustain_lift"]),
        n("Add", ["tone_logits", "sustain_lift"], ["timed_tone_logits"]),
        n("Mul", ["sustain", "score"], ["sustain_drop"]),
        n("Sub", ["blank_logit", "sustain_drop"], ["timed_blank_logit"]),
    ]
    return "timed_blank_logit", "timed_tone_logits"
