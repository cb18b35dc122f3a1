"""Build the tone model: a tiny, deterministic SenseVoice-format CTC model for tests.

It has SenseVoice's exact ONNX interface (``x`` [N,T,560] LFR features, ``x_length``,
``language``, ``text_norm`` -> ``logits`` [N,T+4,V]) and metadata, so the real sherpa-onnx
loader and our own engines run it unchanged; only the "acoustics" are fake: it recognises the
harmonic buzzes of :mod:`kitt_stt.models.tone_synth`.

How it decides, per 10 ms fbank frame ("sub-frame") of the LFR input:

1. energy over the low mel bins, compared with the loudest sub-frame within +-120 ms: a
   sub-frame is *voiced* when it is within ``VOICED_DELTA`` of that local maximum (so loudness
   does not matter, and white noise >= 10 dB below the buzz is not voiced);
2. an *onset* is a voiced sub-frame after an unvoiced one;
3. at an onset, the log-mel spectrum averaged over the following voiced run (up to 100 ms) is
   detrended and compared (cosine) with one prototype per pitch; a match above
   ``MATCH_THRESHOLD`` emits that pitch's token in the LFR frame that holds the onset.  The
   logits there are soft (``SCORE`` for the best pitch, ``SHARPNESS`` x cosine gap less for the
   others), so a buzz between two pitches gives two close scores that hotwords can tip;
4. the token's posterior says how well the burst matched, and a clear match is held over the
   burst's fully voiced frames, so word times span the burst (:mod:`.tone_timing`).

Emitting at an onset and then only on fully voiced frames (instead of on every voiced frame) is
what lets 80 ms bursts separated by 60 ms gaps decode exactly despite the 60 ms LFR frame rate:
a blank frame always separates repeated tokens.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kitt_stt.asr.features import LFR_SHIFT, LFR_WINDOW, NUM_MEL_BINS, log_mel
from kitt_stt.models.onnx_metadata import set_metadata
from kitt_stt.models.tone_synth import TONE_PITCHES, buzz
from kitt_stt.models.tone_timing import timing_nodes

SPECIAL_TOKENS = [
    "<blk>",
    "<unk>",
    "<|zh|>",
    "<|en|>",
    "<|yue|>",
    "<|ja|>",
    "<|ko|>",
    "<|nospeech|>",
    "<|NEUTRAL|>",
    "<|Speech|>",
    "<|withitn|>",
    "<|woitn|>",
]
TOKENS = SPECIAL_TOKENS + list(TONE_PITCHES)

# SenseVoice's real query ids for the ``language`` and ``text_norm`` inputs.
LANGUAGE_IDS = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12}
WITH_ITN_ID = 14
WITHOUT_ITN_ID = 15

SPECTRUM_BINS = 64  # mel bins (up to ~2.6 kHz) where the buzz harmonics are resolved
ENERGY_BINS = 40  # mel bins used for the voicing energy: where buzz energy dominates noise
DETREND_DEGREE = 4  # remove a quartic trend so spectral tilt (noise, level) does not match
MATCH_THRESHOLD = 0.72  # cosine; white noise peaks near 0.5, a buzz at 10 dB SNR >= 0.85
VOICED_DELTA = 1.5  # natural-log energy below the local maximum that still counts as voiced
ENERGY_FLOOR = -3.0  # digital silence is about -12; a buzz at peak 0.01 is about +16
LOCAL_MAX_RADIUS = 12  # sub-frames (120 ms) either side
RUN_LENGTH = 10  # sub-frames averaged after an onset
SCORE = 10.0
SHARPNESS = 40.0  # logit units per unit of cosine gap between the best pitch and another
OPSET = 17


def _detrend_matrix() -> np.ndarray:
    grid = np.linspace(-1.0, 1.0, SPECTRUM_BINS)
    basis = np.stack([grid**degree for degree in range(DETREND_DEGREE + 1)], axis=1)
    orthonormal, _ = np.linalg.qr(basis)
    return np.eye(SPECTRUM_BINS) - orthonormal @ orthonormal.T


def _prototypes(detrend: np.ndarray) -> np.ndarray:
    rows = []
    for f0 in TONE_PITCHES.values():
        frames = log_mel(buzz(f0, 1000.0, 0.5))[5:-5, :SPECTRUM_BINS].astype(np.float64)
        mean = (frames @ detrend).mean(axis=0)
        rows.append(mean / np.linalg.norm(mean))
    return np.stack(rows)


def _const(name: str, value: np.ndarray | list | float | int, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _lookup_table(mapping: dict[int, int], default: int) -> np.ndarray:
    table = np.full(16, default, dtype=np.int64)
    for key, token in mapping.items():
        table[key] = token
    return table


def _run_average(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> tuple[str, str]:
    """Append nodes summing the spectrum over the voiced run that starts at each sub-frame.

    Unrolled look-ahead over ``RUN_LENGTH`` sub-frames: the run mask is the running product of
    "voiced" flags, so the sum stops at the first unvoiced sub-frame.  Returns the names of the
    (numerator, denominator) tensors.
    """
    n = helper.make_node
    run_mask = "ones_like"
    sums: list[tuple[str, str]] = []
    for step in range(RUN_LENGTH):
        inits += [
            _const(f"run_start_{step}", [step], np.int64),
            _const(f"run_end_{step}", [step - RUN_LENGTH], np.int64),
        ]
        nodes += [
            n("Slice", ["voiced_ahead", f"run_start_{step}", f"run_end_{step}", "axis1"], [f"v_{step}"]),
            n("Slice", ["spec_ahead", f"run_start_{step}", f"run_end_{step}", "axis1"], [f"s_{step}"]),
            n("Mul", [run_mask, f"v_{step}"], [f"m_{step}"]),
            n("Unsqueeze", [f"m_{step}", "axis2"], [f"m3_{step}"]),
            n("Mul", [f"m3_{step}", f"s_{step}"], [f"ms_{step}"]),
        ]
        run_mask = f"m_{step}"
        sums.append((f"ms_{step}", f"m_{step}"))
    numerator, denominator = sums[0]
    for step, (spectrum, mask) in enumerate(sums[1:], start=1):
        nodes += [
            n("Add", [numerator, spectrum], [f"num_{step}"]),
            n("Add", [denominator, mask], [f"den_{step}"]),
        ]
        numerator, denominator = f"num_{step}", f"den_{step}"
    return numerator, denominator


def build_graph() -> onnx.ModelProto:
    """The tone model as an ONNX graph (see the module docstring for what it computes)."""
    detrend = _detrend_matrix()
    prototypes = _prototypes(detrend)
    vocab = len(TOKENS)
    num_tones = len(TONE_PITCHES)
    tok = {name: index for index, name in enumerate(TOKENS)}
    language_table = _lookup_table(
        {
            LANGUAGE_IDS["auto"]: tok["<|zh|>"],
            LANGUAGE_IDS["zh"]: tok["<|zh|>"],
            LANGUAGE_IDS["en"]: tok["<|en|>"],
            LANGUAGE_IDS["yue"]: tok["<|yue|>"],
            LANGUAGE_IDS["ja"]: tok["<|ja|>"],
            LANGUAGE_IDS["ko"]: tok["<|ko|>"],
        },
        tok["<|nospeech|>"],
    )
    itn_table = _lookup_table({WITH_ITN_ID: tok["<|withitn|>"]}, tok["<|woitn|>"])
    one_hot = np.full((1, 1, vocab), -SCORE, dtype=np.float32)
    emotion, event = one_hot.copy(), one_hot.copy()
    emotion[0, 0, tok["<|NEUTRAL|>"]] = SCORE
    event[0, 0, tok["<|Speech|>"]] = SCORE

    inits = [
        _const("shape_sub", [0, -1, LFR_WINDOW, NUM_MEL_BINS], np.int64),
        _const("shape_seq", [0, -1, NUM_MEL_BINS], np.int64),
        _const("shape_frames", [0, -1, LFR_SHIFT, num_tones], np.int64),
        _const("zero_i", [0], np.int64),
        _const("one_i", [1], np.int64),
        _const("minus_one_i", [-1], np.int64),
        _const("own_end", [LFR_SHIFT], np.int64),
        _const("axis1", [1], np.int64),
        _const("axis2", [2], np.int64),
        _const("spec_end", [SPECTRUM_BINS], np.int64),
        _const("energy_end", [ENERGY_BINS], np.int64),
        _const("one_f", 1.0),
        _const("shift_f", float(LFR_SHIFT)),
        _const("big_neg", 1.0e4),
        _const("delta", VOICED_DELTA),
        _const("floor", ENERGY_FLOOR),
        _const("norm_eps", 1.0e-3),
        _const("threshold", MATCH_THRESHOLD),
        _const("score", SCORE),
        _const("neg_score", -SCORE),
        _const("sharpness", SHARPNESS),
        _const("silent_offset", 3 * SCORE),
        _const("shape_emit", [0, -1, LFR_SHIFT], np.int64),
        _const("detrend", detrend),
        _const("prototypes_t", prototypes.T),
        _const("pad_prev", [0, 1, 0, 0], np.int64),
        _const("pad_run", [0, 0, 0, RUN_LENGTH], np.int64),
        _const("pad_run3", [0, 0, 0, 0, RUN_LENGTH, 0], np.int64),
        _const("language_table", language_table, np.int64),
        _const("itn_table", itn_table, np.int64),
        _const("onehot_values", [-SCORE, SCORE]),
        _const("vocab_depth", vocab, np.int64),
        _const("emotion_frame", emotion),
        _const("event_frame", event),
        _const("vocab_tail", [1, vocab], np.int64),
        _const("special_repeats", [1, 1, len(SPECIAL_TOKENS) - 1], np.int64),
    ]
    n = helper.make_node
    nodes = [
        # Owned sub-frames: the first 6 of each LFR window tile the timeline without overlap.
        n("Reshape", ["x", "shape_sub"], ["x4"]),
        n("Slice", ["x4", "zero_i", "own_end", "axis2"], ["owned"]),
        n("Reshape", ["owned", "shape_seq"], ["seq"]),
        n("Slice", ["seq", "zero_i", "spec_end", "axis2"], ["spec"]),
        n("Slice", ["seq", "zero_i", "energy_end", "axis2"], ["energy_bins"]),
        n("ReduceLogSumExp", ["energy_bins"], ["energy_raw"], axes=[2], keepdims=0),
        # Sub-frames past x_length (batch padding) are forced silent.
        n("Mul", ["energy_raw", "one_f"], ["ones_like_tmp"]),
        n("Sub", ["ones_like_tmp", "ones_like_tmp"], ["zeros_like"]),
        n("Add", ["zeros_like", "one_f"], ["ones_like"]),
        n("CumSum", ["ones_like", "one_i"], ["position_plus1"]),
        n("Cast", ["x_length"], ["length_f"], to=TensorProto.FLOAT),
        n("Mul", ["length_f", "shift_f"], ["sub_length"]),
        n("Unsqueeze", ["sub_length", "one_i"], ["sub_length_col"]),
        n("LessOrEqual", ["position_plus1", "sub_length_col"], ["valid_b"]),
        n("Cast", ["valid_b"], ["valid"], to=TensorProto.FLOAT),
        n("Sub", ["valid", "one_f"], ["invalid_neg"]),
        n("Mul", ["invalid_neg", "big_neg"], ["invalid_penalty"]),
        n("Mul", ["energy_raw", "valid"], ["energy_valid"]),
        n("Add", ["energy_valid", "invalid_penalty"], ["energy"]),
        # Voicing relative to the local maximum.
        n("Unsqueeze", ["energy", "one_i"], ["energy_c"]),
        n(
            "MaxPool",
            ["energy_c"],
            ["local_max_c"],
            kernel_shape=[2 * LOCAL_MAX_RADIUS + 1],
            pads=[LOCAL_MAX_RADIUS, LOCAL_MAX_RADIUS],
            strides=[1],
        ),
        n("Squeeze", ["local_max_c", "one_i"], ["local_max"]),
        n("Sub", ["local_max", "delta"], ["voice_level"]),
        n("Greater", ["energy", "voice_level"], ["loud_enough"]),
        n("Greater", ["energy", "floor"], ["above_floor"]),
        n("And", ["loud_enough", "above_floor"], ["voiced_b"]),
        n("Cast", ["voiced_b"], ["voiced"], to=TensorProto.FLOAT),
        n("Pad", ["voiced", "pad_prev"], ["voiced_shifted"]),
        n("Slice", ["voiced_shifted", "zero_i", "minus_one_i", "axis1"], ["voiced_prev"]),
        n("Sub", ["one_f", "voiced_prev"], ["unvoiced_prev"]),
        n("Mul", ["voiced", "unvoiced_prev"], ["onset"]),
        n("Pad", ["voiced", "pad_run"], ["voiced_ahead"]),
        n("Pad", ["spec", "pad_run3"], ["spec_ahead"]),
    ]
    numerator, denominator = _run_average(nodes, inits)
    nodes += [
        n("Max", [denominator, "one_f"], ["den_safe"]),
        n("Unsqueeze", ["den_safe", "axis2"], ["den3"]),
        n("Div", [numerator, "den3"], ["run_spectrum"]),
        n("MatMul", ["run_spectrum", "detrend"], ["shape_vec"]),
        n("ReduceL2", ["shape_vec"], ["shape_norm_raw"], axes=[2], keepdims=1),
        n("Max", ["shape_norm_raw", "norm_eps"], ["shape_norm"]),
        n("Div", ["shape_vec", "shape_norm"], ["unit_shape"]),
        n("MatMul", ["unit_shape", "prototypes_t"], ["similarity"]),
        n("ReduceMax", ["similarity"], ["best"], axes=[2], keepdims=0),
        n("Greater", ["best", "threshold"], ["matched_b"]),
        n("Cast", ["matched_b"], ["matched"], to=TensorProto.FLOAT),
        n("Mul", ["onset", "matched"], ["emit"]),
        # Soft scores at an onset: SCORE for the best pitch, less by SHARPNESS x cosine gap for the
        # others, so a buzz between two pitches yields two close logits; -3 x SCORE elsewhere.
        n("ReduceMax", ["similarity"], ["best_k"], axes=[2], keepdims=1),
        n("Sub", ["similarity", "best_k"], ["gap"]),
        n("Mul", ["gap", "sharpness"], ["gap_scaled"]),
        n("Add", ["gap_scaled", "score"], ["soft"]),
        n("Add", ["soft", "silent_offset"], ["soft_lifted"]),
        n("Unsqueeze", ["emit", "axis2"], ["emit3"]),
        n("Mul", ["soft_lifted", "emit3"], ["sub_lifted"]),
        n("Sub", ["sub_lifted", "silent_offset"], ["sub_scores"]),
        n("Reshape", ["sub_scores", "shape_frames"], ["frame_sub_scores"]),
        n("ReduceMax", ["frame_sub_scores"], ["tone_logits"], axes=[2], keepdims=0),
        n("Reshape", ["emit", "shape_emit"], ["frame_emit"]),
        n("ReduceMax", ["frame_emit"], ["any_hit"], axes=[2], keepdims=1),
        n("Sub", ["one_f", "any_hit"], ["blank_hit"]),
    ]
    blank_logit, tone_logits = timing_nodes(nodes, inits, num_tones)  # confidence and duration
    nodes += [
        n("Mul", ["blank_hit", "one_f"], ["special_base_tmp"]),
        n("Sub", ["special_base_tmp", "special_base_tmp"], ["special_zero"]),
        n("Add", ["special_zero", "neg_score"], ["special_one"]),
        n("Tile", ["special_one", "special_repeats"], ["special_logits"]),
        n("Concat", [blank_logit, "special_logits", tone_logits], ["body"], axis=2),
        # The four SenseVoice prefix frames: language, emotion, event, text-norm.
        n("Shape", ["x"], ["x_shape"]),
        n("Slice", ["x_shape", "zero_i", "one_i"], ["batch"]),
        n("Concat", ["batch", "vocab_tail"], ["prefix_shape"], axis=0),
        n("Gather", ["language_table", "language"], ["lang_token"]),
        n("OneHot", ["lang_token", "vocab_depth", "onehot_values"], ["lang_frame2"], axis=-1),
        n("Unsqueeze", ["lang_frame2", "one_i"], ["lang_frame"]),
        n("Gather", ["itn_table", "text_norm"], ["itn_token"]),
        n("OneHot", ["itn_token", "vocab_depth", "onehot_values"], ["itn_frame2"], axis=-1),
        n("Unsqueeze", ["itn_frame2", "one_i"], ["itn_frame"]),
        n("Expand", ["emotion_frame", "prefix_shape"], ["emotion_frames"]),
        n("Expand", ["event_frame", "prefix_shape"], ["event_frames"]),
        n(
            "Concat",
            ["lang_frame", "emotion_frames", "event_frames", "itn_frame", "body"],
            ["logits"],
            axis=1,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "tone_sense_voice",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", NUM_MEL_BINS * LFR_WINDOW]),
            helper.make_tensor_value_info("x_length", TensorProto.INT32, ["N"]),
            helper.make_tensor_value_info("language", TensorProto.INT32, ["N"]),
            helper.make_tensor_value_info("text_norm", TensorProto.INT32, ["N"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "T4", vocab])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kitt-stt")
    model.ir_version = 8
    _set_metadata(model, vocab)
    onnx.checker.check_model(model)
    return model


def _set_metadata(model: onnx.ModelProto, vocab: int) -> None:
    dim = NUM_MEL_BINS * LFR_WINDOW
    meta = {
        "model_type": "sense_voice_ctc",
        "model_author": "kitt-stt tone model (synthetic, for tests)",
        "vocab_size": str(vocab),
        "lfr_window_size": str(LFR_WINDOW),
        "lfr_window_shift": str(LFR_SHIFT),
        "normalize_samples": "0",
        "with_itn": str(WITH_ITN_ID),
        "without_itn": str(WITHOUT_ITN_ID),
        "lang_auto": str(LANGUAGE_IDS["auto"]),
        "lang_zh": str(LANGUAGE_IDS["zh"]),
        "lang_en": str(LANGUAGE_IDS["en"]),
        "lang_ja": str(LANGUAGE_IDS["ja"]),
        "lang_ko": str(LANGUAGE_IDS["ko"]),
        "lang_yue": str(LANGUAGE_IDS["yue"]),
        "neg_mean": ",".join(["0"] * dim),
        "inv_stddev": ",".join(["1"] * dim),
    }
    set_metadata(model, meta)


def build_tone_model(out_dir: Path) -> dict[str, str]:
    """Write ``model.onnx`` and ``tokens.txt`` into ``out_dir``; return each file's sha256."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "model.onnx": build_graph().SerializeToString(),
        "tokens.txt": "".join(f"{token} {index}\n" for index, token in enumerate(TOKENS)).encode(),
    }
    digests = {}
    for name, payload in files.items():
        temporary = out_dir / f".{name}.partial"
        temporary.write_bytes(payload)
        temporary.replace(out_dir / name)
        digests[name] = hashlib.sha256(payload).hexdigest()
    return digests
