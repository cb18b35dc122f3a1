"""The SenseVoice front end as sherpa-onnx computes it (numpy + kaldi-native-fbank).

Kept in one place so that everything that must agree with sherpa-onnx's features (the tone
model's prototypes today, the onnxruntime SenseVoice engine later) uses the same options.
"""

from __future__ import annotations

import threading

import kaldi_native_fbank as knf
import numpy as np

SAMPLE_RATE = 16000
NUM_MEL_BINS = 80
LFR_WINDOW = 7
LFR_SHIFT = 6


def fbank_options() -> knf.FbankOptions:
    """Options sherpa-onnx uses for SenseVoice: 80 bins, hamming, snip_edges, no dither, mel
    bands from 20 Hz up to Nyquist (``high_freq = 0``; kaldi-native-fbank's default is -400)."""
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.frame_opts.window_type = "hamming"
    opts.mel_opts.num_bins = NUM_MEL_BINS
    opts.mel_opts.low_freq = 20.0
    opts.mel_opts.high_freq = 0.0
    return opts


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Audio -> (frames, 80) log-mel.  Float input is in [-1, 1] and scaled to the int16 range as
    sherpa-onnx does (``normalize_samples=0``); int16 input is used as is."""
    audio = np.asarray(audio)
    scaled = audio.astype(np.float32) if audio.dtype == np.int16 else audio.astype(np.float32) * 32768.0
    fbank = knf.OnlineFbank(fbank_options())
    fbank.accept_waveform(SAMPLE_RATE, scaled.tolist())
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


def frame_count(samples: int) -> int:
    """Fbank frames (25 ms window, 10 ms shift, snip_edges) in ``samples`` samples."""
    return 0 if samples < 400 else 1 + (samples - 400) // 160


class FeatureStream:
    """Fbank frames of one growing segment, computed once per sample.

    Each decode of an open segment (interims, then the final) hands over the segment's whole
    PCM so far; only the samples not seen before go through the fbank.  Decodes of one segment
    may run on different workers in any order (an older interim after a newer one), so a shorter
    request gets the frames of its prefix: with ``snip_edges`` a frame depends only on its own
    25 ms window.  A lock serialises the updates.
    """

    def __init__(self) -> None:
        self._fbank = knf.OnlineFbank(fbank_options())
        self._consumed = 0
        self._frames = np.zeros((0, NUM_MEL_BINS), dtype=np.float32)
        self._lock = threading.Lock()

    def frames_for(self, samples: np.ndarray) -> np.ndarray:
        """Fbank frames for ``samples`` (int16), which must extend what earlier calls saw."""
        with self._lock:
            if samples.shape[0] < self._consumed:
                return self._frames[: frame_count(samples.shape[0])]
            fresh = samples[self._consumed :]
            if fresh.shape[0]:
                self._fbank.accept_waveform(SAMPLE_RATE, fresh.astype(np.float32).tolist())
                self._consumed = samples.shape[0]
                ready = self._fbank.num_frames_ready
                have = self._frames.shape[0]
                if ready > have:
                    new = np.stack([self._fbank.get_frame(i) for i in range(have, ready)]).astype(np.float32)
                    self._frames = np.concatenate([self._frames, new])
            return self._frames
