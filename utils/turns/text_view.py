"""whisper-base's decoder as a text-only language model: does the sentence end after these words?

``recognizer_view.py`` measured the recognizer's own view (encoder on the turn's audio, greedy
decode): strong in English but about 370 ms a turn, and its encoder pass cannot be shared with
sherpa-onnx. This script asks what is left without the audio: the transcript the server already
has (``text`` per clip in ``features.json``) is tokenized, teacher-forced after
``<|sot|><|lang|><|transcribe|><|notimestamps|>``, and the cross-attention reads a FIXED encoder
output computed once per process (the encoder on a few frames of digital silence, whose log-mel
is Whisper's floor everywhere). The reading is the recognizer view's ``ends_logit`` after the
last word. Per fixed window it prints the AUC alone (no fit) per group of clips, beside the
audio view (cached) and the sentence-end trigram LM, the cost per turn on one thread of each
way to run it (the export as it is, with logits at every position; the same over the tokens up
to the last word only; the graph cut at load time to the last position's logits, with the
export's 448-slot self-attention cache or a short one, from the prompt on or after the prompt's
cache: ``Cut``), and onnxruntime's profile of one export call:

    PYTHONPATH=. python -m utils.turns.text_view --models <model cache> --windows 2 10 100 3000

The result and what it means are in docs/turns.md ("The recognizer's own view").
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import statistics
import sys
import time
from enum import Enum
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from utils.performance.toolkit.stats import nearest_rank
from utils.turns.extract import TABLE
from utils.turns.recognizer_view import RecognizerView, View
from utils.turns.scores import auc, clip_key

# GPT-2's pre-tokenizer (what tiktoken splits on before BPE), with Python's ``re``: a letter is
# ``[^\W\d_]``, a number ``\d``, the rest neither space nor letter nor digit.
_PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")
_PROJECTION = "/MatMul_60_quant"  # the vocabulary MatMul (its DynamicQuantizeMatMul after fusion)
_LAST_HIDDEN = "/LayerNormalization_18_output_0"  # the decoder's final layer norm, before the vocabulary MatMul


class Tokenizer:
    """Whisper's byte-level BPE from the tokens file alone: a token's index is its tiktoken rank,
    and tiktoken merges, within a piece, the adjacent pair whose joined bytes rank lowest."""

    def __init__(self, tokens_file: Path) -> None:
        self._rank: dict[bytes, int] = {}
        for line in tokens_file.read_text(encoding="utf-8").splitlines():
            encoded, index = line.rsplit(" ", 1)
            self._rank[base64.b64decode(encoded)] = int(index)

    def _merge(self, piece: bytes) -> list[int]:
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            ranks = [self._rank.get(parts[i] + parts[i + 1], sys.maxsize) for i in range(len(parts) - 1)]
            best = min(range(len(ranks)), key=ranks.__getitem__)
            if ranks[best] == sys.maxsize:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self._rank[part] for part in parts]

    def encode(self, text: str) -> list[int]:
        return [token for piece in _PIECES.findall(text) for token in self._merge(piece.encode("utf-8"))]

    def decode(self, tokens: list[int]) -> str:
        by_rank = {rank: raw for raw, rank in self._rank.items()}
        return b"".join(by_rank[t] for t in tokens).decode("utf-8", errors="replace")


class Cut(Enum):
    """Ways to run the decoder cut to the last position's logits (``last_position_decoder``):
    with the export's 448-slot self-attention caches or a short one (only the positions used),
    over prompt + words or over the words after the prompt's cache (computed once)."""

    CUT = "cut graph"
    CUT_CACHED = "cut graph, prompt cached"
    SHORT = "cut graph, short cache"
    SHORT_CACHED = "cut graph, short cache, prompt cached"

    @property
    def short(self) -> bool:
        return self in (Cut.SHORT, Cut.SHORT_CACHED)

    @property
    def cached(self) -> bool:
        return self in (Cut.CUT_CACHED, Cut.SHORT_CACHED)


COST_STEPS = ("tokenize", "export, whole transcript", "export, up to the last word", *(cut.value for cut in Cut))
AUC_COLUMNS = ("export", Cut.SHORT.value, Cut.SHORT_CACHED.value)  # the other cuts: the drift line shows them


def last_position_decoder(decoder_path: Path, short_cache: bool, num_threads: int = 1) -> ort.InferenceSession:
    """The decoder with a Gather of the last position inserted before the vocabulary projection:
    logits (N, 1, vocab) instead of (N, n, vocab). The dynamic quantization of that MatMul's input
    then sees one row, not all, so its scale (and the logits) may move slightly. ``short_cache``:
    the self-attention cache inputs get a free length instead of 448 slots; the export reads only
    ``cache[:offset]`` and concatenates the new positions, so a cache of ``offset`` positions gives
    the same logits without copying 448 slots in and out of every call."""
    model = onnx.load(str(decoder_path))
    graph = model.graph
    if short_cache:
        for graph_input in graph.input:
            if graph_input.name.startswith("in_n_layer_self_"):
                graph_input.type.tensor_type.shape.dim[2].dim_param = "cache_positions"
        del graph.value_info[:]  # inferred shapes that still say 448
    consumers = [node for node in graph.node if _LAST_HIDDEN in node.input]
    graph.initializer.append(onnx.numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_position_index"))
    producer = next(i for i, node in enumerate(graph.node) if _LAST_HIDDEN in node.output)
    gather = onnx.helper.make_node("Gather", [_LAST_HIDDEN, "last_position_index"], ["last_position_hidden"],
                                   axis=1, name="last_position_gather")
    graph.node.insert(producer + 1, gather)
    for node in consumers:
        node.input[:] = ["last_position_hidden" if name == _LAST_HIDDEN else name for name in node.input]
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = num_threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


class TextView:
    """The text-only view: the recognizer view's decoder and token kinds, a fixed cross-attention."""

    def __init__(self, model_dir: Path, window_frames: int) -> None:
        self.view = RecognizerView(model_dir)
        self.tokenizer = Tokenizer(model_dir / "base-tokens.txt")
        self._cut_sessions = {short: last_position_decoder(model_dir / "base-decoder.int8.onnx", short)
                              for short in (False, True)}
        self._prompt_caches: dict[tuple[str, bool], tuple[np.ndarray, np.ndarray]] = {}
        self.cross = self.view.encode_mel(np.full((1, 80, window_frames), _silence_floor(), dtype=np.float32))

    def tokens(self, text: str, lang: str) -> list[int]:
        """The transcript as Whisper would have written it: English with its leading space."""
        return self.tokenizer.encode(" " + text if lang == "en" else text)

    def to_last_word(self, tokens: list[int]) -> list[int]:
        words = self.view.word_positions(tokens)
        return tokens[: words[-1] + 1] if words else []

    def full(self, tokens: list[int], lang: str) -> View:
        """One pass of the export as it is, over the whole transcript (logits at every position)."""
        return self.view.view(tokens, self.view.teacher_forced(self.cross, lang, tokens))

    def _run_cut(self, short: bool, tokens: list[int], caches: tuple[np.ndarray, np.ndarray] | None,
                 offset: int) -> list[np.ndarray]:
        if caches is None:
            shape = self.view.cache_shape
            empty = np.zeros((shape[0], shape[1], 0, shape[3]) if short else shape, dtype=np.float32)
            caches = (empty, empty)
        return self._cut_sessions[short].run(None, {
            "tokens": np.array([tokens], dtype=np.int64), "in_n_layer_self_k_cache": caches[0],
            "in_n_layer_self_v_cache": caches[1], "n_layer_cross_k": self.cross[0], "n_layer_cross_v": self.cross[1],
            "offset": np.array([offset], dtype=np.int64)})

    def prompt_cache(self, lang: str, short: bool) -> tuple[np.ndarray, np.ndarray]:
        """The prompt's self-attention cache: with a fixed cross-attention it never changes, so a
        process computes it once per language."""
        if (lang, short) not in self._prompt_caches:
            _, self_k, self_v = self._run_cut(short, self.view.prompt(lang), None, 0)
            self._prompt_caches[lang, short] = (self_k, self_v)
        return self._prompt_caches[lang, short]

    def last_only(self, tokens: list[int], lang: str, cut: Cut) -> float:
        """``ends_logit`` from a cut graph over the tokens up to the last word (one distribution)."""
        if not tokens:
            return 0.0
        if cut.cached:
            prompt_cache = self.prompt_cache(lang, cut.short)
            logits = self._run_cut(cut.short, tokens, prompt_cache, len(self.view.prompt(lang)))[0]
        else:
            logits = self._run_cut(cut.short, self.view.prompt(lang) + tokens, None, 0)[0]
        last = np.asarray(logits[0, -1], dtype=np.float64)
        distribution = np.exp(last - last.max())
        return self.view.after_word(distribution / distribution.sum()).ends_logit()


def _silence_floor() -> float:
    """Digital silence through Whisper's log-mel: log10(1e-10) everywhere, (x + 4) / 4 = -1.5."""
    return (np.log10(1e-10) + 4.0) / 4.0


def groups(clips: list[dict]) -> list[tuple[str, list[dict]]]:
    """recognizer_view's groups, with human English split by the kind of cut."""
    human = [c for c in clips if not c["synthetic"]]
    en = [c for c in human if c["lang"] == "en"]
    return [("all clips", clips), ("human en", en),
            ("human en, word cuts", [c for c in en if c["complete"] or c["cut"] == "word"]),
            ("human en, pause cuts", [c for c in en if c["complete"] or c["cut"] == "pause"]),
            ("human zh (joined syllables)", [c for c in human if c["lang"] == "zh"]),
            ("synthetic", [c for c in clips if c["synthetic"]])]


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.1f} / {(nearest_rank(seconds, 95) or 0.0) * 1000:.1f}"


def measure(text_view: TextView, clips: list[dict]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Each clip's text-only ``ends_logit`` (from the export and from each cut graph) and the cost
    lines (median / p95 ms, one thread)."""
    scores: dict[str, dict[str, float]] = {"export": {}, **{cut.value: {} for cut in Cut}}
    spent: dict[str, list[float]] = {name: [] for name in COST_STEPS}
    drift: dict[str, list[float]] = {cut.value: [] for cut in Cut}
    for clip in clips:
        start = time.perf_counter()
        tokens = text_view.tokens(clip["text"], clip["lang"])
        marks = [start, time.perf_counter()]
        full = text_view.full(tokens, clip["lang"]).ends_logit()
        marks.append(time.perf_counter())
        shorter = text_view.to_last_word(tokens)
        text_view.full(shorter, clip["lang"])
        marks.append(time.perf_counter())
        scores["export"][clip_key(clip)] = full
        for cut in Cut:
            scores[cut.value][clip_key(clip)] = text_view.last_only(shorter, clip["lang"], cut)
            marks.append(time.perf_counter())
            drift[cut.value].append(abs(full - scores[cut.value][clip_key(clip)]))
        for index, name in enumerate(COST_STEPS):
            spent[name].append(marks[index + 1] - marks[index])
    lengths = [len(text_view.tokens(c["text"], c["lang"])) for c in clips]
    tokenizer = text_view.tokenizer
    round_trip = sum(tokenizer.decode(tokenizer.encode(c["text"])) == c["text"] for c in clips)
    lines = [f"cost per turn, one thread, {len(clips)} transcripts of {min(lengths)}..{max(lengths)} tokens "
             f"(median {statistics.median(lengths):.0f}) + 4 prompt tokens, median / p95 ms: "
             + "; ".join(f"{name} {_ms(spent[name])}" for name in COST_STEPS),
             "ends_logit against the export's: |difference| median / max "
             + ", ".join(f"{name} {statistics.median(d):.3f} / {max(d):.3f}" for name, d in drift.items())
             + f"; transcripts whose tokens decode back to the text: {round_trip} / {len(clips)}"]
    return scores, lines


def profile(model_dir: Path, text_view: TextView, tokens: list[int], runs: int = 20) -> list[str]:
    """Where one export call over prompt + ``tokens`` spends its time: onnxruntime's own per-node
    profile, one thread, summed per kind of node (is the vocabulary projection the cost?)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads, options.enable_profiling = 1, 1, True
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(model_dir / "base-decoder.int8.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    empty = np.zeros(text_view.view.cache_shape, dtype=np.float32)
    feeds = {"tokens": np.array([text_view.view.prompt("en") + tokens], dtype=np.int64),
             "in_n_layer_self_k_cache": empty, "in_n_layer_self_v_cache": empty,
             "n_layer_cross_k": text_view.cross[0], "n_layer_cross_v": text_view.cross[1],
             "offset": np.array([0], dtype=np.int64)}
    for _ in range(runs):
        session.run(None, feeds)
    trace = Path(session.end_profiling())
    spent: dict[str, float] = {}
    for event in json.loads(trace.read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            kind = "vocabulary projection" if event["name"].startswith(_PROJECTION) else event["args"]["op_name"]
            spent[kind] = spent.get(kind, 0.0) + event["dur"] / 1000 / runs
    trace.unlink()
    ranked = sorted(spent.items(), key=lambda item: -item[1])
    return [f"profile of one export call over {len(tokens)} + 4 tokens ({runs} runs, kernel time only): "
            f"{sum(spent.values()):.1f} ms, of it " + ", ".join(f"{kind} {ms:.2f}" for kind, ms in ranked[:6])]


def auc_table(clips: list[dict], columns: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| clips | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, group in groups(clips):
        labels = [c["complete"] for c in group]
        cells = [f"{auc([scores[clip_key(c)] for c in group], labels):.2f}" for scores in columns.values()]
        lines.append(f"| {name}: {sum(labels)} complete, {len(labels) - sum(labels)} cut | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--models", type=Path, required=True, help="model cache with whisper-base/")
    parser.add_argument("--windows", type=int, nargs="+", default=[2, 10, 100, 3000],
                        help="frames of silence the fixed encoder output is computed on (one column each)")
    args = parser.parse_args()
    clips = json.loads(args.table.read_text())["clips"]
    columns = {"audio view (cached, recognizer_view)": {clip_key(c): View(**c["view"]).ends_logit() for c in clips},
               "sentence_end (trigram LM)": {clip_key(c): c["sentence_end"] for c in clips}}  # as extract.py cached it
    costs = []
    for frames in args.windows:
        text_view = TextView(args.models / "whisper-base", frames)
        scores, lines = measure(text_view, clips)
        for way in AUC_COLUMNS:
            columns[f"text-only, {frames} frames, {way}"] = scores[way]
        costs += [f"{frames} frames: {line}" for line in lines]
        costs += [f"{frames} frames: {line}" for line in
                  profile(args.models / "whisper-base", text_view, text_view.tokens("Open the window please", "en"))]
    print("AUC alone (complete vs cut, no fit):\n")
    print("\n".join(auc_table(clips, columns)))
    print("\n" + "\n".join(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
