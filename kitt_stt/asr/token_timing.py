"""Each emitted CTC token's frames and posterior, from the logits a decode already has.

A token occupies the frames of its run on the CTC path: from the frame where it was emitted, on
while it stays more likely than blank, up to the next token's frame. For greedy decoding that is
exactly the path (between two emissions the argmax is the token or blank); for beam search, whose
hypotheses keep only emission frames, it is the same rule applied to the chosen prefix.

Confidence is the token's softmax posterior at the frame where it was emitted: the probability
the model gave this token where the path put it. CTC models are peaky (a token lives on one or
two frames and blank owns the rest), so an average over frames would measure how long the spike
is, not how sure the model is; and on the frames after the emission a repeat only says the token
goes on. Only those frames are normalised (a log-sum-exp over the vocabulary per token), so the
cost is per token, not per frame of audio.
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


def token_posteriors(logits: np.ndarray, decoded: CtcResult) -> list[float]:
    """Each token's softmax probability at the frame where it was emitted."""
    if not decoded.frames:
        return []
    # a new array (take copies), normalised in place; float32: numpy's vectorised exp and sum are
    # several times float64's over 25k tokens, and the sum of at most 25k terms in [0, 1] keeps ~6 digits
    block = np.take(logits, decoded.frames, axis=0).astype(np.float32, copy=False)
    rows = np.arange(len(decoded.frames))
    peak = block.max(axis=-1, keepdims=True)
    chosen = block[rows, decoded.token_ids] - peak[:, 0]
    np.subtract(block, peak, out=block)
    np.exp(block, out=block)
    log_norm = np.log(block.sum(axis=-1).astype(np.float64))
    return [float(value) for value in np.exp(chosen.astype(np.float64) - log_norm)]


def timed_tokens(logits: np.ndarray, length: int, decoded: CtcResult, symbols: Sequence[str],
                 skip: int, frame_ms: int) -> list[TimedToken]:
    """The tokens after the first ``skip`` (SenseVoice's language/emotion/event/ITN prefix, whose
    frames hold no audio), timed in ms from the audio's start: frame ``f`` covers
    ``[(f - skip) * frame_ms, (f - skip + 1) * frame_ms)``."""
    body = CtcResult(decoded.token_ids[skip:], decoded.frames[skip:])
    runs = token_runs(logits, length, body)
    posteriors = token_posteriors(logits, body)
    return [TimedToken(symbol, (first - skip) * frame_ms, (last - skip + 1) * frame_ms, probability)
            for symbol, (first, last), probability in zip(symbols[skip:], runs, posteriors, strict=True)]
