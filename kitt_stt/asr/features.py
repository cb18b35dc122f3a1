"""The SenseVoice front end as sherpa-onnx computes it (numpy + kaldi-native-fbank).

Kept in one place so that everything that must agree with sherpa-onnx's features (the tone
model's prototypes today, the onnxruntime SenseVoice engine later) uses the same options.
"""

from __future__ import annotations

import kaldi_native_fbank as knf
import numpy as np

SAMPLE_RATE = 16000
NUM_MEL_BINS = 80
LFR_WINDOW = 7
LFR_SHIFT = 6


def fbank_options() -> knf.FbankOptions:
    """Options sherpa-onnx uses for SenseVoice: 80 bins, hamming, snip_edges, no dither."""
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.frame_opts.window_type = "hamming"
    opts.mel_opts.num_bins = NUM_MEL_BINS
    opts.mel_opts.low_freq = 20.0
    return opts


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] -> (frames, 80) log-mel, scaled to int16 range as sherpa does."""
    fbank = knf.OnlineFbank(fbank_options())
    fbank.accept_waveform(SAMPLE_RATE, (np.asarray(audio, dtype=np.float32) * 32768.0).tolist())
    fbank.input_finished()
    if fbank.num_frames_ready == 0:
        return np.zeros((0, NUM_MEL_BINS), dtype=np.float32)
    return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)]).astype(np.float32)


def apply_lfr(frames: np.ndarray) -> np.ndarray:
    """Stack 7 frames every 6 (window centred, edges repeated) -> (ceil(T/6), 560)."""
    count = frames.shape[0]
    if count == 0:
        return np.zeros((0, NUM_MEL_BINS * LFR_WINDOW), dtype=np.float32)
    out_count = (count + LFR_SHIFT - 1) // LFR_SHIFT
    left = (LFR_WINDOW - 1) // 2
    right = out_count * LFR_SHIFT + LFR_WINDOW - count - left
    padded = np.concatenate(
        [np.repeat(frames[:1], left, 0), frames, np.repeat(frames[-1:], max(right, 0), 0)]
    )
    windows = [padded[LFR_SHIFT * t : LFR_SHIFT * t + LFR_WINDOW].reshape(-1) for t in range(out_count)]
    return np.stack(windows).astype(np.float32)
