"""CTC decoding over logits: greedy (exactly as sherpa-onnx does it) and prefix beam search
with hotword biasing.

Hotwords live in a token trie.  Every token that extends a partial hotword match earns the
hotword's boost (in natural-log units) on the hypothesis's score; when the match then fails,
the bonus collected for it is taken back, so a partial match never keeps a lasting advantage.
A completed match keeps its bonus.  Tokens that start or continue a hotword are considered
at every frame even outside the top candidates, but only when the model scores them within
``HOTWORD_FLOOR`` of the frame's best token: a hotword can tip a close call, never invent a word.

The search works on raw logits, not log-softmax: every hypothesis consumes every frame, so
the per-frame normaliser adds the same constant to all of them and cannot change a ranking,
and skipping it saves an exp over the whole vocabulary (25k entries per frame for SenseVoice).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kitt_stt.hotwords import Hotword

NEG_INF = float("-inf")
# Building a trie is pure Python that holds the GIL: for the largest list (1000 words of 64
# tokens, ~0.1-0.3 s here) the event loop would wait up to the interpreter's 5 ms switch interval
# at every wake-up, and a bystander's ping p99 rose ~40x.  Every few words the builder sleeps a
# moment, so a thread waiting for the GIL (the loop) gets it at once (utils/performance/hotword_flood_bench.py).
GIL_BREAK_EVERY = 8
GIL_BREAK_S = 0.0001
CANDIDATES_PER_FRAME = 8
HOTWORD_FLOOR = -8.0  # natural-log units below the frame's best token


def _logaddexp(a: float, b: float) -> float:
    """log(exp(a) + exp(b)) on Python floats (numpy's ufunc costs ~1 µs per scalar call)."""
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@dataclass
class CtcResult:
    token_ids: list[int]
    frames: list[int]  # the frame where each token was emitted


def greedy(logits: np.ndarray, length: int, blank: int = 0) -> CtcResult:
    """Argmax per frame over the first ``length`` frames; repeats collapse, blanks drop."""
    best = np.argmax(logits[:length], axis=-1)
    tokens, frames, previous = [], [], blank
    for frame, token in enumerate(best.tolist()):
        if token != blank and token != previous:
            tokens.append(token)
            frames.append(frame)
        previous = token
    return CtcResult(tokens, frames)


class HotwordTrie:
    """Hotwords as token-id sequences; each node knows the boost of the words through it.

    Nodes are ints (0 is the root) indexing flat lists, not objects: the largest list a client
    may send makes ~64,000 nodes, and as objects they were what the garbage collector walked on
    every full collection, for every cached trie (stalls of ~0.25 s on the event loop).  Dicts
    of ints are not tracked by the collector at all.
    """

    ROOT = 0

    def __init__(self, entries: Sequence[tuple[Sequence[int], float]]) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.boost: list[float] = [0.0]
        self.is_end: list[bool] = [False]
        for count, (token_ids, boost) in enumerate(entries, start=1):
            if count % GIL_BREAK_EVERY == 0:
                time.sleep(GIL_BREAK_S)  # see GIL_BREAK_EVERY
            if not token_ids:
                continue
            node = self.ROOT
            for token in token_ids:
                child = self.children[node].get(token)
                if child is None:
                    child = self.children[node][token] = len(self.children)
                    self.children.append({})
                    self.boost.append(0.0)
                    self.is_end.append(False)
                node = child
                if boost > self.boost[node]:
                    self.boost[node] = boost
            self.is_end[node] = True

    def __bool__(self) -> bool:
        return bool(self.children[self.ROOT])


class PieceIndex:
    """The vocabulary as a character trie: the longest token at a position in one walk.

    Clients choose hotwords, so tokenising them must be cheap: trying every substring length at
    every position made a list of 1000 64-character words cost ~0.5 s of the GIL, while a walk
    stops as soon as no token continues (a few steps for real words).  Built once per engine.
    """

    def __init__(self, vocabulary: Mapping[str, int]) -> None:
        self._root: dict[str | None, Any] = {}
        for token, index in vocabulary.items():
            node = self._root
            for char in token:
                node = node.setdefault(char, {})
            node[None] = index  # None marks "a token ends here" (never a character)

    def longest(self, text: str, start: int, prefix: str = "") -> tuple[int, int] | None:
        """(token id, end) of the longest token that is ``prefix`` + ``text[start:end]``, or None."""
        node: dict[str | None, Any] | None = self._root
        for char in prefix:
            node = node.get(char) if node is not None else None
        best = None
        position = start
        while node is not None and position < len(text):
            node = node.get(text[position])
            position += 1
            if node is not None and None in node:
                best = (node[None], position)
        return best


def tokenize_hotword(word: Hotword, vocabulary: Mapping[str, int] | PieceIndex) -> list[int]:
    """Greedy longest match of the hotword's text against the vocabulary.

    SentencePiece vocabularies mark word starts with '▁', so each space-separated word is tried
    with that prefix first (at equal length the marked piece wins).  Characters that match nothing
    are skipped (and reported by returning fewer tokens; an empty list means the word cannot be
    biased).  Pass a ``PieceIndex`` when tokenising many words with one vocabulary.
    """
    index = vocabulary if isinstance(vocabulary, PieceIndex) else PieceIndex(vocabulary)
    ids: list[int] = []
    for word_text in word.text.split():
        position, first = 0, True
        while position < len(word_text):
            match = index.longest(word_text, position)
            if first:
                marked = index.longest(word_text, position, "▁")
                if marked is not None and (match is None or marked[1] >= match[1]):
                    match = marked
            if match is None:
                position += 1
            else:
                ids.append(match[0])
                position = match[1]
            first = False
    return ids


def tokenize_hotwords(hotwords: Sequence[Hotword],
                      pieces: PieceIndex) -> tuple[list[tuple[list[int], float]], list[str]]:
    """``HotwordTrie`` entries for ``hotwords``, and the texts of those with no token in the
    vocabulary (they cannot be biased; the caller reports them, once per list)."""
    entries: list[tuple[list[int], float]] = []
    unmatched: list[str] = []
    for count, word in enumerate(hotwords, start=1):
        if count % GIL_BREAK_EVERY == 0:
            time.sleep(GIL_BREAK_S)  # see GIL_BREAK_EVERY
        ids = tokenize_hotword(word, pieces)
        if not ids:
            unmatched.append(word.text)
        entries.append((ids, word.boost))
    return entries, unmatched


@dataclass
class _Hyp:
    p_blank: float = NEG_INF
    p_token: float = NEG_INF
    node: int | None = None  # position in the hotword trie (None: root)
    partial: float = 0.0  # bonus of the current, unfinished hotword match
    bonus: float = 0.0  # total hotword bonus, partial included
    frames: tuple[int, ...] = ()

    @property
    def acoustic(self) -> float:
        return _logaddexp(self.p_blank, self.p_token)

    @property
    def score(self) -> float:
        return self.acoustic + self.bonus


def _advance(trie: HotwordTrie, hyp: _Hyp, token: int) -> tuple[int | None, float, float]:
    """Trie state after emitting ``token``: (node, partial bonus, total bonus)."""
    node = trie.ROOT if hyp.node is None else hyp.node
    child = trie.children[node].get(token)
    bonus, partial = hyp.bonus, hyp.partial
    if child is None and node != trie.ROOT:
        bonus -= partial  # the partial match failed: take its bonus back
        partial = 0.0
        child = trie.children[trie.ROOT].get(token)
    if child is None:
        return None, partial, bonus
    partial += trie.boost[child]
    bonus += trie.boost[child]
    if trie.is_end[child]:
        partial = 0.0  # a finished match keeps its bonus for good
        if not trie.children[child]:
            return None, partial, bonus
    return child, partial, bonus


def beam_search(logits: np.ndarray, length: int, beam: int, trie: HotwordTrie | None = None,
                blank: int = 0) -> CtcResult:
    """CTC prefix beam search over logits (see the module docstring), with optional hotword biasing."""
    frames = np.asarray(logits[:length], dtype=np.float32)
    if frames.shape[0] == 0:
        return CtcResult([], [])
    keep = min(CANDIDATES_PER_FRAME, frames.shape[-1])
    tops = np.argpartition(frames, -keep, axis=-1)[:, -keep:]
    floor_array = frames.max(axis=-1) + HOTWORD_FLOOR
    floors = floor_array.tolist()
    first_tokens = trie.children[trie.ROOT] if trie else {}
    starts = np.array(sorted(t for t in first_tokens if 0 <= t < frames.shape[-1]), dtype=int)
    start_ok = frames[:, starts] > floor_array[:, None] if starts.size else None
    hyps: dict[tuple[int, ...], _Hyp] = {(): _Hyp(p_blank=0.0)}
    for t in range(frames.shape[0]):
        frame = frames[t]
        top = tops[t].tolist()
        row = dict(zip(top, frame[top].tolist(), strict=True))
        row.setdefault(blank, float(frame[blank]))
        common = {token for token in top if token != blank}
        frame_starts: list[int] = []
        if start_ok is not None:
            eligible = starts[start_ok[t]]
            if eligible.size > CANDIDATES_PER_FRAME:  # bound the work: the best-scored starts only
                eligible = eligible[np.argpartition(frame[eligible], -CANDIDATES_PER_FRAME)[-CANDIDATES_PER_FRAME:]]
            frame_starts = eligible.tolist()
        next_hyps: dict[tuple[int, ...], _Hyp] = {}
        for prefix, hyp in hyps.items():
            total = _logaddexp(hyp.p_blank, hyp.p_token)
            stay = next_hyps.get(prefix)
            if stay is None:
                stay = _Hyp(node=hyp.node, partial=hyp.partial, bonus=hyp.bonus, frames=hyp.frames)
                next_hyps[prefix] = stay
            stay.p_blank = _logaddexp(stay.p_blank, total + row[blank])
            candidates = set(common)
            if trie:
                extra = set(trie.children[hyp.node]) if hyp.node is not None else set()
                extra.update(frame_starts)
                for token in extra - candidates:
                    if 0 <= token < frame.shape[0] and (score := float(frame[token])) > floors[t]:
                        row[token] = score
                        candidates.add(token)
            for token in candidates:
                p = row[token]
                if prefix and prefix[-1] == token:
                    stay.p_token = _logaddexp(stay.p_token, hyp.p_token + p)  # repeat collapses
                    source = hyp.p_blank  # a blank in between makes it a new token
                else:
                    source = total
                if source == NEG_INF:
                    continue
                extended = (*prefix, token)
                target = next_hyps.get(extended)
                if target is None:
                    node, partial, bonus = _advance(trie, hyp, token) if trie else (None, 0.0, 0.0)
                    target = _Hyp(node=node, partial=partial, bonus=bonus, frames=(*hyp.frames, t))
                    next_hyps[extended] = target
                target.p_token = _logaddexp(target.p_token, source + p)
        ranked = sorted(next_hyps.items(), key=lambda item: item[1].score, reverse=True)
        hyps = dict(ranked[:beam])
    # at the end an unfinished partial match gets nothing
    best_prefix, best = max(hyps.items(), key=lambda item: item[1].score - item[1].partial)
    return CtcResult(list(best_prefix), list(best.frames))
