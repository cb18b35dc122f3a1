"""Whisper's language step, restricted to a set, on onnxruntime over the same encoder/decoder files.

Why a separate pass: sherpa-onnx fixes the language per recognizer and, given none, detects it
inside ``decode_stream`` among all 99 languages without exposing the scores or the encoder
output, so the encoder output cannot be shared with its decode. This runs what Whisper's
``detect_language`` runs: the encoder on the segment's log-mel, then the decoder's first step
(the start-of-transcript token alone) whose logits at the language tokens are the language
scores; those outside the allowed set are masked (``asr/language.py``). The pipeline runs it once
per segment (not per chunk or interim).

Its cost is mostly the encoder, which grows with the frames it reads: sherpa-onnx appends
``tail_paddings`` frames of silence for decoding (700 = 7 s here); the language step reads at
most ``window_frames`` of the speech (quiet ends trimmed) and ``pad_frames`` of silence.
``bias`` adds a constant to a language's score (a log prior: on short commands whisper-base
scores Mandarin too low).

The padding is the value Whisper itself sees after speech: it pads the audio with digital
silence, whose log-mel is clamped to the window's maximum less 8, i.e. ``mel.max() - 2`` once
normalised. sherpa-onnx pads its features with 0 (the normalised value of log10 = -4, louder
than that floor), and on that padding whisper-base's language scores were worse: with Whisper's
own floor, 300 frames separate zh from en better than 700 frames of zeros.
``utils/performance/lid_report.py`` tunes the window, the padding and the bias on some
recordings and reports on others (docs/models.md, "Language detection").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnxruntime as ort

from kitt_stt.asr.language import LanguageGuess, restricted_guess
from kitt_stt.asr.whisper_graphs import (
    FRAME_SAMPLES,
    MAX_FRAMES,
    WhisperGraphs,
    padded_mel,
    silence_level,
    whisper_log_mel,
)
from kitt_stt.asr.whisper_model import WhisperModel
from kitt_stt.config.schema import AsrConfig

__all__ = ["MAX_FRAMES", "WhisperLanguageDetector", "speech_span", "whisper_log_mel", "whisper_sessions"]

SPEECH_FLOOR = 0.1  # of the loudest frame's RMS: quieter frames at either end are not speech


def speech_span(samples: np.ndarray) -> np.ndarray:
    """``samples`` without the quiet frames at either end. A segment begins with the VAD's
    pre-roll (300 ms before the onset, mostly silence); the window should hold speech."""
    count = samples.shape[0] // FRAME_SAMPLES
    if count == 0:
        return samples
    frames = samples[: count * FRAME_SAMPLES].reshape(count, FRAME_SAMPLES).astype(np.float32)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    loud = np.flatnonzero(rms > rms.max() * SPEECH_FLOOR)
    if loud.size == 0:
        return samples
    return samples[loud[0] * FRAME_SAMPLES : (loud[-1] + 1) * FRAME_SAMPLES]


def whisper_sessions(model: WhisperModel, num_threads: int) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """Our export's encoder and decoder on onnxruntime's CPU provider, ``num_threads`` each and no
    spinning: they run beside sherpa-onnx's own decode and must not take its cores while idle."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return (ort.InferenceSession(str(model.encoder_path), options, providers=["CPUExecutionProvider"]),
            ort.InferenceSession(str(model.decoder_path), options, providers=["CPUExecutionProvider"]))


class WhisperLanguageDetector:
    """``graphs``: the decoding engine's own sessions, so detecting loads no second model copy;
    None: sessions of its own on the CPU (beside sherpa-onnx, which keeps its sessions to itself)."""

    def __init__(self, model: WhisperModel, num_threads: int = 1, window_frames: int = 150, pad_frames: int = 300,
                 bias: Mapping[str, float] | None = None, pad_as_whisper: bool = True,
                 graphs: WhisperGraphs | None = None) -> None:
        self._graphs = graphs or WhisperGraphs(model, AsrConfig(num_threads=num_threads))
        tokens = self._graphs.tokens
        self._sot = tokens.sot
        self._language_tokens = dict(tokens.languages)
        self._window_frames = min(window_frames, MAX_FRAMES)
        self._pad_frames = pad_frames
        self._bias = dict(bias or {})
        self._pad_as_whisper = pad_as_whisper  # False: sherpa-onnx's zeros (the report's "before")

    @property
    def language_tokens(self) -> dict[str, int]:
        """Each language's token id (its score is the logit there)."""
        return dict(self._language_tokens)

    def detect(self, samples: np.ndarray, allowed: Sequence[str]) -> LanguageGuess:
        """The most likely of ``allowed`` for ``samples`` (int16, 16 kHz)."""
        logits = self.language_logits(samples)
        for code, offset in self._bias.items():
            if code in self._language_tokens:
                logits[self._language_tokens[code]] += offset
        return restricted_guess(logits, self._language_tokens, allowed)

    def language_logits(self, samples: np.ndarray) -> np.ndarray:
        """The decoder's first-step logits over the whole vocabulary (the language scores are
        those at the language tokens)."""
        mel = whisper_log_mel(speech_span(samples)[: self._window_frames * FRAME_SAMPLES])
        silence = silence_level(mel) if self._pad_as_whisper else 0.0
        graphs = self._graphs
        cross = graphs.encode(padded_mel(mel, self._pad_frames, silence))
        cache = graphs.empty_cache()
        logits, _, _ = graphs.step([self._sot], (cache, cache), cross, 0)
        return logits
