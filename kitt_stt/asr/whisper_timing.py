"""Word times and confidence from one Whisper decode: the alignment heads' cross-attention, aligned
to the audio by dynamic time warping, the method of openai/whisper's ``timing.py``.

Some decoder heads attend to where in the audio the token they are reading was spoken (for
whisper-base the eight the converter exports, ``models/whisper_export.py``). Each decode step gives
their raw scores over the encoder frames (20 ms each) for its input token; the row of
``<|notimestamps|>`` and of each text token (which predicts the next) make a (tokens + 1) x frames
matrix per head. As Whisper does: keep the frames that hold audio (not the tail padding), softmax
over them, standardise each frame across the tokens, median-filter along time (width 7), average
the heads, and find the monotonic path through the negated matrix that costs least. Each row's
first frame on the path is where that token starts; it ends where the next one starts (the last
one where ``<|endoftext|>``'s row starts). The path starts at the first frame and ends at the last
frame of audio, so the first word would take in the silence before the speech (a segment begins
with 300 ms of VAD pre-roll) and the last the silence after it: the first word starts no earlier,
and the last ends no later, than the piece's loud frames (RMS above a tenth of the loudest 10 ms,
the bound ``asr/whisper_language.py`` trims to), where that leaves the word some time.

Confidence: the token's probability at the step that chose it, its softmax over the text tokens
(as Whisper's ``timing.py`` takes it); a word's is its weakest token's and the text's the words'
geometric mean, as for SenseVoice (``asr/words.py``). Whisper's byte-level tokens may split a
character; tokens are joined until their bytes decode, and such a unit takes the first one's start
and the last one's end. Words that ``strip_annotations`` removes from the text (``[Music]``, an
annotation over several words such as ``(door closes)``) are left out of the words too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from kitt_stt.asr.text import outside_annotations
from kitt_stt.asr.words import TimedToken, TimedWord, words_from_tokens

FRAME_MS = 20  # one encoder frame: two 10 ms mel frames
MEDIAN_WIDTH = 7
SPEECH_FLOOR = 0.1  # of the loudest 10 ms frame's RMS: quieter frames at either end are not speech


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """The median over ``width`` neighbours along the last axis, the edges mirrored (no repeat of
    the edge itself); shorter rows than the half-width stay as they are."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    # the middle of an odd window, found without sorting it: the median, ~3x faster than np.median
    return np.partition(windows, pad, axis=-1)[..., pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-cost monotonic path from (0, 0) to the last cell of ``cost`` (rows x columns),
    stepping down, right or diagonally; returns its row and column indices in order. The table is
    filled one anti-diagonal at a time (each cell needs the two before it), so the loop is over
    rows + columns, not rows x columns. A step wins only when strictly cheaper than both others
    (diagonal, then down); otherwise the step is to the right, the rule Whisper's own DTW has."""
    rows, cols = cost.shape
    total = np.full((rows + 1, cols + 1), np.inf)
    total[0, 0] = 0.0
    move = np.zeros((rows + 1, cols + 1), dtype=np.int8)  # 0 diagonal, 1 down (row - 1), 2 right
    for diagonal in range(2, rows + cols + 1):
        i = np.arange(max(1, diagonal - cols), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        options = np.stack([total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]])
        best = np.where((options[0] < options[1]) & (options[0] < options[2]), 0,
                        np.where((options[1] < options[0]) & (options[1] < options[2]), 1, 2))
        total[i, j] = cost[i - 1, j - 1] + options[best, np.arange(i.size)]
        move[i, j] = best
    path_i, path_j = [], []
    i, j = rows, cols
    while i > 0 and j > 0:  # the first row and column are unreachable but for (0, 0): it ends at (1, 1)
        path_i.append(i - 1)
        path_j.append(j - 1)
        step = move[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(path_i[::-1]), np.array(path_j[::-1])


def token_starts_ms(scores: np.ndarray, audio_frames: int) -> np.ndarray:
    """``scores`` (heads, tokens + 1, encoder frames): each row's start in ms on the DTW path."""
    weights = scores[:, :, : max(audio_frames, 1)].astype(np.float64)
    weights = np.exp(weights - weights.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    mean = weights.mean(axis=-2, keepdims=True)
    spread = weights.std(axis=-2, keepdims=True)
    weights = (weights - mean) / np.where(spread > 0, spread, 1.0)
    matrix = median_filter(weights).mean(axis=0)
    rows, frames = dtw(-matrix)
    first = np.concatenate([[True], np.diff(rows) > 0])
    return frames[first] * FRAME_MS


def speech_bounds_ms(samples: np.ndarray) -> tuple[int, int]:
    """Where the loud frames of ``samples`` (int16, 16 kHz) begin and end, in ms."""
    count = samples.shape[0] // 160
    if count == 0:
        return 0, samples.shape[0] // 16
    frames = samples[: count * 160].reshape(count, 160).astype(np.float32)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    loud = np.flatnonzero(rms > rms.max() * SPEECH_FLOOR)
    return (int(loud[0]) * 10, int(loud[-1] + 1) * 10) if loud.size else (0, count * 10)


MAX_CHARACTER_BYTES = 4  # UTF-8's longest character


def whisper_words(pieces: Sequence[bytes], probabilities: Sequence[float], scores: np.ndarray,
                  audio_frames: int, speech_ms: tuple[int, int]) -> tuple[TimedWord, ...]:
    """The words of a decode's text tokens (``pieces``: each token's bytes, specials left out),
    with ``probabilities`` per token, the alignment ``scores`` of their rows, and where the speech
    is (``speech_bounds_ms``; see module)."""
    if not pieces or scores.shape[1] != len(pieces) + 1:
        return ()
    starts = token_starts_ms(scores, audio_frames)
    units: list[TimedToken] = []
    pending, first, weakest = b"", 0, 1.0
    for index, piece in enumerate(pieces):
        if not pending:
            first, weakest = index, 1.0
        pending += piece
        weakest = min(weakest, float(probabilities[index]))
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.reason == "unexpected end of data" and len(pending) < MAX_CHARACTER_BYTES:
                continue  # the character goes on in the next token
            # bytes no character can hold (the text drops them too): drop them, keep the words after
            text = pending.decode("utf-8", errors="ignore")
        units.append(TimedToken(text, int(starts[first]), int(starts[index + 1]), weakest))
        pending = b""
    timed = words_from_tokens(units)
    words = [word for word, kept in zip(timed, outside_annotations([word.text for word in timed]), strict=True)
             if kept]
    onset, offset = speech_ms
    if words and words[0].start_ms < onset < words[0].end_ms:
        words[0] = dataclasses.replace(words[0], start_ms=onset)
    if words and words[-1].start_ms < offset < words[-1].end_ms:
        words[-1] = dataclasses.replace(words[-1], end_ms=offset)
    return tuple(words)
