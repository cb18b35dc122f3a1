"""Each emitted CTC token's frames and posterior, from the logits a decode already has.

A token occupies the frames of its run on the CTC path: from the frame where it was emitted, on
while it stays more likely than blank, up to the next token's frame. For greedy decoding that is
exactly the path (between two emissions the argmax is the token or blank); for beam search, whose
hypotheses keep only emission frames, it is the same rule applied to the chosen prefix.

Confidence is the token's softmax posterior at its best frame in that run. CTC models are peaky:
a token lives on one or two frames and blank owns the rest, so an average over the run would
measure how long the spike is, not how sure the model is; the peak is the probability the model
gave this token where it put it. Only the run's frames are normalised (a log-sum-exp over the
vocabulary for a handful of frames), so the cost is per token, not per frame of audio.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kitt_stt.asr.ctc import CtcResult
from kitt_stt.asr.words import TimedToken


def token_runs(logits: np.ndarray, length: int, decoded: CtcResult, blank: int = 0) -> list[tuple[int, int]]:
    """(first, last) frame of each token of ``decoded``, by the rule in the module docstring."""
    runs = []
    frames = decoded.frames
    for index, (token, first) in enumerate(zip(decoded.token_ids, frames, strict=True)):
        stop = frames[index + 1] if index + 1 < len(frames) else length
        last = first
        while last + 1 < stop and logits[last + 1, token] > logits[last + 1, blank]:
            last += 1
        runs.append((first, last))
    return runs


def token_posteriors(logits: np.ndarray, decoded: CtcResult, runs: Sequence[tuple[int, int]]) -> list[float]:
    """Each token's highest softmax probability over its run."""
    if not runs:
        return []
    rows = sorted({frame for first, last in runs for frame in range(first, last + 1)})
    block = np.asarray(logits[rows], dtype=np.float64)
    peak = block.max(axis=-1, keepdims=True)
    log_norm = (peak + np.log(np.exp(block - peak).sum(axis=-1, keepdims=True)))[:, 0]
    where = {frame: position for position, frame in enumerate(rows)}
    posteriors = []
    for token, (first, last) in zip(decoded.token_ids, runs, strict=True):
        best = max(block[where[frame], token] - log_norm[where[frame]] for frame in range(first, last + 1))
        posteriors.append(float(np.exp(best)))
    return posteriors


def timed_tokens(logits: np.ndarray, length: int, decoded: CtcResult, symbols: Sequence[str],
                 skip: int, frame_ms: int) -> list[TimedToken]:
    """The tokens after the first ``skip`` (SenseVoice's language/emotion/event/ITN prefix, whose
    frames hold no audio), timed in ms from the audio's start: frame ``f`` covers
    ``[(f - skip) * frame_ms, (f - skip + 1) * frame_ms)``."""
    body = CtcResult(decoded.token_ids[skip:], decoded.frames[skip:])
    runs = token_runs(logits, length, body)
    posteriors = token_posteriors(logits, body, runs)
    return [TimedToken(symbol, (first - skip) * frame_ms, (last - skip + 1) * frame_ms, probability)
            for symbol, (first, last), probability in zip(symbols[skip:], runs, posteriors, strict=True)]
