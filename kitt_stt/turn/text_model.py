"""The text view of the end of turn: how likely a small chat model finds that the user's message
ends after the turn's words so far (docs/turns.md).

SmolLM2-135M-Instruct, zero-shot: its chat template with the turn's text as the user's message,
left open, and the probability of the template's end-of-message token (``<|im_end|>``) next. A
model trained on conversations has learnt when a user's message is finished; LiveKit's first
turn detector was this model, fine-tuned. The text is normalised as the model was scored
(``normalise``): lower case, no punctuation, since the recognizer punctuates cut phrases too.

Cost is what decides whether it can run on every final, so nothing is computed twice: the
template's prefix (system prompt, user header) is run once at load, and the turns' recent prompts
stay in a small cache of their keys and values; a new final extends the longest cached prompt it
starts with and runs only its new tokens (a final adds ~5-15). Calls are serialised by a lock:
the policy calls from its one evidence thread, and the cache is not shared state to race on.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kitt_stt.models.gguf_blocks import dequantize_rows
from kitt_stt.models.llama_export import (
    CONFIG_FILE,
    EMBEDDING_FILE,
    EMBEDDING_SCALES_FILE,
    GRAPH_FILE,
    TOKENIZER_FILE,
)

# the chat template's own default system message (SmolLM2's, unchanged: the model was scored with it)
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
MAX_TEXT_TOKENS = 192  # a turn's last words: ~40 s of speech; longer turns keep their end
MIN_NEW_TOKENS = 2  # rows per run when the cache could leave one (_longest_cached)
CACHED_TOKENS = 512  # tokens of keys and values kept across turns (46 KB each: 24 MB at most)
_PUNCTUATION = re.compile(r"[^\w\s']|_")
_LOG_ODDS_LIMIT = 30.0


class TextModelError(Exception):
    """The text model's files are missing or unusable."""


@dataclass(frozen=True)
class TextEnd:
    log_odds: float  # log P(end of message next) - log P(anything else)
    new_tokens: int  # tokens this call ran (the rest came from the cache)
    ms: float


def normalise(text: str) -> str:
    """The text as the model is scored on: NFKC, lower case, punctuation dropped, spaces collapsed."""
    bare = _PUNCTUATION.sub(" ", unicodedata.normalize("NFKC", text).lower())
    return " ".join(word.strip("'") for word in bare.split() if word.strip("'"))


@dataclass
class _Cached:
    ids: tuple[int, ...]  # the whole prompt, prefix included
    after_prefix: list[np.ndarray]  # per layer key, value [1, kv_heads, len(ids) - prefix, head]
    log_odds: float


class TurnTextModel:
    def __init__(self, directory: Path, num_threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            config = json.loads((directory / CONFIG_FILE).read_text())
            self._tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
            self._embedding = np.load(directory / EMBEDDING_FILE, mmap_mode="r")
            self._embedding_scales = np.load(directory / EMBEDDING_SCALES_FILE, mmap_mode="r")
            options = ort.SessionOptions()
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = num_threads
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(str(directory / GRAPH_FILE), options,
                                                 providers=["CPUExecutionProvider"])
            self._layers = int(config["layers"])
            self._end_id = int(config["end_token_id"])
            self._empty = np.zeros((1, int(config["kv_heads"]), 0, int(config["head_size"])), np.float32)
            self._prefix_ids = tuple(self._tokenizer.encode(PREFIX).ids)
            # the prefix run also proves the graph, the embedding and the tokenizer fit each other
            presents, _ = self._run(list(self._prefix_ids), [self._empty] * (2 * self._layers), 0)
        except Exception as exc:  # missing files, bad JSON or keys, and onnxruntime's own exception types
            raise TextModelError(
                f"{directory}: not a usable end-of-turn text model ({type(exc).__name__}: {exc}); "
                "`kitt-stt models verify` says which file changed: delete the directory and run "
                "`kitt-stt models pull smollm2-turn` to install it again") from None
        self._prefix = presents  # per layer key, value: [1, kv_heads, prefix, head]
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, ...], _Cached] = OrderedDict()

    def end_of_turn(self, text: str) -> TextEnd | None:
        """The log-odds that the user's message ends after ``text``; None for no words (no opinion)."""
        words = normalise(text)
        if not words:
            return None
        started = time.perf_counter()
        text_ids = self._tokenizer.encode(words, add_special_tokens=False).ids[-MAX_TEXT_TOKENS:]
        ids = self._prefix_ids + tuple(text_ids)
        with self._lock:
            cached = self._cache.get(ids)
            if cached is not None:
                self._cache.move_to_end(ids)
                return TextEnd(cached.log_odds, 0, (time.perf_counter() - started) * 1000.0)
            past, reused = self._longest_cached(ids)
            presents, log_odds = self._run(list(ids[reused:]), past, reused)
            prefix = len(self._prefix_ids)
            self._remember(_Cached(ids, [np.ascontiguousarray(array[:, :, prefix:]) for array in presents], log_odds))
        return TextEnd(log_odds, len(ids) - reused, (time.perf_counter() - started) * 1000.0)

    def _longest_cached(self, ids: tuple[int, ...]) -> tuple[list[np.ndarray], int]:
        """The keys and values (per layer key, value) of the longest cached start of ``ids``, at least
        the prefix, and its length. ``MIN_NEW_TOKENS`` are always left to run: the answer is read at
        the last, and onnxruntime's Q4_1 kernel takes another path for one row than for several, whose
        answers differ by up to a nat; with two or more rows a text scores the same whatever was cached."""
        prefix = len(self._prefix_ids)
        best, best_length = None, prefix
        for entry in self._cache.values():
            length = _common_length(entry.ids, ids, len(ids) - MIN_NEW_TOKENS)
            if length > best_length:
                best, best_length = entry, length
        if best is None:
            return self._prefix, prefix
        self._cache.move_to_end(best.ids)
        keep = best_length - prefix
        joined = zip(self._prefix, best.after_prefix, strict=True)
        return [np.concatenate([start, rest[:, :, :keep]], axis=2) for start, rest in joined], best_length

    def _run(self, new_ids: list[int], past: list[np.ndarray], past_length: int) -> tuple[list[np.ndarray], float]:
        """``new_ids`` after ``past_length`` tokens whose keys and values are ``past``: the presents
        (per layer key, value, all tokens) and the end-of-message log-odds at the last token."""
        feeds: dict[str, np.ndarray] = {
            "inputs_embeds": dequantize_rows(self._embedding, self._embedding_scales, new_ids)[None],
            "seqlens_k": np.array([past_length + len(new_ids) - 1], np.int32),
            "total_sequence_length": np.array([past_length + len(new_ids)], np.int32)}
        for layer in range(self._layers):
            feeds[f"past_key_{layer}"], feeds[f"past_value_{layer}"] = past[2 * layer], past[2 * layer + 1]
        outputs = self._session.run(None, feeds)
        end = float(outputs[0][0][self._end_id])
        rest = math.log(max(-math.expm1(end), 1e-300))  # log P(not the end), exact for p near 1 too
        return list(outputs[1:]), max(-_LOG_ODDS_LIMIT, min(_LOG_ODDS_LIMIT, end - rest))

    def _remember(self, entry: _Cached) -> None:
        self._cache[entry.ids] = entry
        while sum(len(cached.ids) - len(self._prefix_ids) for cached in self._cache.values()) > CACHED_TOKENS:
            self._cache.popitem(last=False)


def _common_length(a: tuple[int, ...], b: tuple[int, ...], limit: int) -> int:
    length = 0
    for x, y in zip(a[:limit], b[:limit], strict=False):
        if x != y:
            break
        length += 1
    return length
