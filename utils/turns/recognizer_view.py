"""The recognizer's own view of the end of a turn: does whisper-base think the sentence is over?

Issue 23 asks to measure this before adopting it. Whisper-base (our ONNX pair, on onnxruntime)
reads the turn's audio plus the first look's pause, decodes greedily after
``<|sot|><|lang|><|transcribe|><|notimestamps|>``, and at the position after the transcript's
last word reads how much probability goes to "the sentence ends here" (a sentence-final
punctuation token or ``<|endoftext|>``) against "it goes on" (another word, a comma or an
ellipsis). On a cut turn a language model that hears a phrase stop mid-sentence might prefer to
go on; this script checks whether it does, on the labelled set, held-out speaker by held-out
speaker:

    PYTHONPATH=. python -m utils.turns.extract --models <model cache>   # caches the view per clip
    PYTHONPATH=. python -m utils.turns.recognizer_view --models <model cache>

It prints the view's AUC alone (no fit) per group of clips; for the shipped combiner, the
combiner with the view and a small combiner around it (leave-one-speaker-out fits at the first
look, as ``train.py`` fits) their AUC and how many complete turns each commits at the first look
at a threshold that cuts off at most 10 % of the cut ones (chosen on the clips themselves, then
on the other speakers only); and with ``--models`` what the view costs per turn on one thread.
The result and what it means are in docs/turns.md ("The recognizer's own view").
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from kitt_stt.asr.sense_voice_model import read_model_header
from kitt_stt.asr.whisper_language import MAX_FRAMES, whisper_log_mel, whisper_sessions
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.turn.features import feature_vector
from kitt_stt.turn.prosody import Prosody
from utils.turns.scores import auc, clip_key

PAD_FRAMES = 700  # as sherpa-onnx's tail_paddings in utils/turns/extract.py, with its zeros
MAX_TOKENS = 48  # a turn's transcript is a few words; a looping decode stops here
FINAL_MARKS = set(".?!。？！")
GOING_ON_MARKS = set(",，、;；:：-—…")
FULLWIDTH_FIRST_BYTE = b"\xef"  # UTF-8's first byte of U+F000..U+FFFF, the fullwidth forms among them
_LOGIT_CLIP = 12.0
MAX_CUT_SHARE = 0.10


class TokenKind(Enum):
    WORD = "word"
    FINAL = "final"
    GOING_ON = "going_on"
    FULLWIDTH_PREFIX = "fullwidth_prefix"


def token_kinds(tokens_file: Path) -> dict[int, TokenKind]:
    """Each text token's kind: sentence-final punctuation ("." "?" "。" …, not "..."), punctuation
    that says the sentence goes on ("," "、" "..." …), or a word (everything else). The vocabulary
    has no token for "，" "？" "！": they are spelled in three byte tokens, the first (0xEF) shared,
    so that first byte is a kind of its own, counted neither as ending nor as going on."""
    kinds: dict[int, TokenKind] = {}
    for line in tokens_file.read_text(encoding="utf-8").splitlines():
        encoded, index = line.rsplit(" ", 1)
        raw = base64.b64decode(encoded)
        text = raw.decode("utf-8", errors="replace").strip()
        if raw == FULLWIDTH_FIRST_BYTE:
            kinds[int(index)] = TokenKind.FULLWIDTH_PREFIX
        elif text and set(text) <= FINAL_MARKS and ".." not in text:
            kinds[int(index)] = TokenKind.FINAL
        elif text and set(text) <= FINAL_MARKS | GOING_ON_MARKS:
            kinds[int(index)] = TokenKind.GOING_ON
        else:
            kinds[int(index)] = TokenKind.WORD
    return kinds


def continuation_bytes(tokens_file: Path, vocab: int) -> np.ndarray:
    """True for tokens made only of UTF-8 continuation bytes (0x80..0xBF): the middle or end of a
    character that another token began."""
    flags = np.zeros(vocab, dtype=bool)
    for line in tokens_file.read_text(encoding="utf-8").splitlines():
        encoded, index = line.rsplit(" ", 1)
        raw = base64.b64decode(encoded)
        flags[int(index)] = bool(raw) and all(0x80 <= byte <= 0xBF for byte in raw)
    return flags


@dataclass(frozen=True)
class View:
    """Probabilities after the transcript's last word (all 0 when the transcript has no word)."""

    p_final: float  # sentence-final punctuation
    p_eot: float  # <|endoftext|> straight after the word
    p_word: float  # another word
    p_going_on: float  # a comma, an ellipsis
    p_fullwidth: float  # the first byte of "，" "？" "！" (either way)
    p_eot_last: float  # <|endoftext|> after the whole greedy transcript
    tokens: int  # text tokens the greedy decode produced

    def ends_logit(self) -> float:
        """log of (ends here) / (goes on), clipped: the view as one feature; 0 without words."""
        ends, goes_on = self.p_final + self.p_eot, self.p_word + self.p_going_on
        if ends <= 0.0 and goes_on <= 0.0:
            return 0.0
        return max(-_LOGIT_CLIP, min(_LOGIT_CLIP, math.log(max(ends, 1e-9) / max(goes_on, 1e-9))))

    def as_dict(self) -> dict[str, float]:
        return {key: round(float(value), 6) for key, value in self.__dict__.items()}


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


class RecognizerView:
    """whisper-base's encoder and decoder on onnxruntime, one thread, for the view and its cost."""

    def __init__(self, model_dir: Path, num_threads: int = 1, pad_frames: int = PAD_FRAMES,
                 pad_as_whisper: bool = False) -> None:
        self.pad_frames, self.pad_as_whisper = pad_frames, pad_as_whisper
        model = load_whisper_model(model_dir)
        metadata = read_model_header(model.encoder_path).metadata
        self._sot, self._eot = int(metadata["sot"]), int(metadata["eot"])
        self._transcribe, self._no_timestamps = int(metadata["transcribe"]), int(metadata["no_timestamps"])
        codes = metadata["all_language_codes"].split(",")
        self._language = dict(zip(codes, (int(t) for t in metadata["all_language_tokens"].split(",")), strict=True))
        self.cache_shape = (int(metadata["n_text_layer"]), 1, int(metadata["n_text_ctx"]),
                            int(metadata["n_text_state"]))
        vocab = int(metadata["n_vocab"])
        kinds = token_kinds(model.tokens_path)
        self._continuation = continuation_bytes(model.tokens_path, vocab)
        self._mask = {kind: np.array([kinds.get(i) is kind for i in range(vocab)]) for kind in TokenKind}
        self._encoder, self._decoder = whisper_sessions(model, num_threads)

    def prompt(self, lang: str) -> list[int]:
        return [self._sot, self._language[lang], self._transcribe, self._no_timestamps]

    def encode(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cross-attention keys and values for the turn's audio (int16, 16 kHz), padded with
        ``pad_frames`` of sherpa-onnx's zeros or, ``pad_as_whisper``, of Whisper's own silence
        floor (``mel.max() - 2`` normalised, as ``asr/whisper_language.py`` on main pads)."""
        mel = whisper_log_mel(samples)
        frames = min(mel.shape[1] + self.pad_frames, MAX_FRAMES)
        silence = mel.max() - 2.0 if self.pad_as_whisper and mel.size else 0.0
        padded = np.full((1, mel.shape[0], max(frames, 2)), silence, dtype=np.float32)
        padded[0, :, : mel.shape[1]] = mel[:, :frames]
        return self.encode_mel(padded)

    def encode_mel(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cross-attention keys and values for a normalised log-mel (1, 80, frames)."""
        cross_k, cross_v = self._encoder.run(None, {"mel": mel})
        return cross_k, cross_v

    def _step(self, tokens: list[int], offset: int, caches: tuple[np.ndarray, np.ndarray],
              cross: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        logits, self_k, self_v = self._decoder.run(None, {
            "tokens": np.array([tokens], dtype=np.int64),
            "in_n_layer_self_k_cache": caches[0], "in_n_layer_self_v_cache": caches[1],
            "n_layer_cross_k": cross[0], "n_layer_cross_v": cross[1],
            "offset": np.array([offset], dtype=np.int64)})
        return np.asarray(logits[0], dtype=np.float64), (self_k, self_v)

    def greedy(self, cross: tuple[np.ndarray, np.ndarray], lang: str) -> tuple[list[int], list[np.ndarray]]:
        """Greedy transcript tokens and the distribution at each position after the prompt's last."""
        prompt = self.prompt(lang)
        empty = np.zeros(self.cache_shape, dtype=np.float32)
        logits, caches = self._step(prompt, 0, (empty, empty), cross)
        distributions = [_softmax(logits[-1])]
        tokens: list[int] = []
        while len(tokens) < MAX_TOKENS:
            token = int(np.argmax(distributions[-1]))
            if token >= self._eot:
                break
            tokens.append(token)
            logits, caches = self._step([token], len(prompt) + len(tokens) - 1, caches, cross)
            distributions.append(_softmax(logits[-1]))
        return tokens, distributions

    def teacher_forced(self, cross: tuple[np.ndarray, np.ndarray], lang: str, tokens: list[int]) -> list[np.ndarray]:
        """The same distributions from one decoder pass over prompt + tokens (what a server that
        already has the transcript's tokens would run)."""
        prompt = self.prompt(lang)
        empty = np.zeros(self.cache_shape, dtype=np.float32)
        logits, _ = self._step(prompt + tokens, 0, (empty, empty), cross)
        return [_softmax(row) for row in logits[len(prompt) - 1:]]

    def word_positions(self, tokens: list[int]) -> list[int]:
        """Indices of word tokens, without the continuation bytes of a fullwidth mark ("，" is
        0xEF then byte tokens of 0x80..0xBF)."""
        positions, in_mark = [], False
        for index, token in enumerate(tokens):
            if self._mask[TokenKind.FULLWIDTH_PREFIX][token]:
                in_mark = True
                continue
            in_mark = in_mark and self._continuation[token]
            if not in_mark and self._mask[TokenKind.WORD][token]:
                positions.append(index)
        return positions

    def view(self, tokens: list[int], distributions: list[np.ndarray]) -> View:
        words = self.word_positions(tokens)
        if not words:
            return View(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, len(tokens))
        return self.after_word(distributions[words[-1] + 1], float(distributions[len(tokens)][self._eot]), len(tokens))

    def after_word(self, after: np.ndarray, p_eot_last: float = 0.0, tokens: int = 0) -> View:
        """The view from the distribution after the last word (all that docs/turns.md's text-only study read)."""
        return View(float(after[self._mask[TokenKind.FINAL]].sum()), float(after[self._eot]),
                    float(after[self._mask[TokenKind.WORD]].sum()), float(after[self._mask[TokenKind.GOING_ON]].sum()),
                    float(after[self._mask[TokenKind.FULLWIDTH_PREFIX]].sum()), p_eot_last, tokens)

    def score(self, samples: np.ndarray, lang: str) -> View:
        tokens, distributions = self.greedy(self.encode(samples), lang)
        return self.view(tokens, distributions)


def _groups(clips: list[dict]) -> list[tuple[str, list[dict]]]:
    human = [c for c in clips if not c["synthetic"]]
    return [("all clips", clips), ("human", human),
            ("human en", [c for c in human if c["lang"] == "en"]),
            ("human zh (joined syllables)", [c for c in human if c["lang"] == "zh"]),
            ("synthetic", [c for c in clips if c["synthetic"]])]


def clip_view(clip: dict) -> View:
    """The view extract.py cached beside the clip (the studies read it without the models)."""
    return View(**clip["view"])


VIEW_FEATURES = {
    "ends_logit (ends / goes on, after the last word)": lambda v: v.ends_logit(),
    "p_final (final punctuation after the last word)": lambda v: v.p_final,
    "p_eot (end of text after the last word)": lambda v: v.p_eot,
    "p_eot_last (end of text after the transcript)": lambda v: v.p_eot_last,
}


def alone_table(clips: list[dict]) -> list[str]:
    """AUC of each reading of the view by itself (no fit: nothing is held out or learned)."""
    lines = ["| clips | " + " | ".join(VIEW_FEATURES) + " | TurnSense p (100 ms) |",
             "|---" * (len(VIEW_FEATURES) + 2) + "|"]
    for name, group in _groups(clips):
        labels = [c["complete"] for c in group]
        cells = [f"{auc([read(clip_view(c)) for c in group], labels):.2f}" for read in VIEW_FEATURES.values()]
        cells.append(f"{auc([c['p']['100'] for c in group], labels):.2f}")
        lines.append(f"| {name}: {sum(labels)} complete, {len(labels) - sum(labels)} cut | " + " | ".join(cells) + " |")
    return lines


def speaker_table(clips: list[dict]) -> list[str]:
    """Per speaker, the view's AUC against TurnSense's (does one speaker carry the result?)."""
    lines = ["| speaker | clips | ends_logit AUC | TurnSense p AUC |", "|---|---|---|---|"]
    for speaker in sorted({c["speaker"] for c in clips}):
        group = [c for c in clips if c["speaker"] == speaker]
        labels = [c["complete"] for c in group]
        lines.append(f"| {speaker} | {len(group)} | {auc([clip_view(c).ends_logit() for c in group], labels):.2f} | "
                     f"{auc([c['p']['100'] for c in group], labels):.2f} |")
    return lines


def length_table(clips: list[dict]) -> list[str]:
    """Is the view the turn's length in disguise? (Cut turns are shorter by construction.) The
    length's own AUC, and the view's correlation with the length within complete and within cut
    turns."""
    lines = ["| clips | AUC of the speech's length | corr(ends_logit, length): complete | cut |", "|---|---|---|---|"]
    for name, group in _groups(clips):
        cells = [f"{auc([c['speech_ms'] for c in group], [c['complete'] for c in group]):.2f}"]
        for complete in (True, False):
            chosen = [c for c in group if c["complete"] is complete]
            views, lengths = [clip_view(c).ends_logit() for c in chosen], [c["speech_ms"] for c in chosen]
            cells.append(f"{np.corrcoef(views, lengths)[0, 1]:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


Row = Callable[[dict, int], list[float]]


def _shipped(clip: dict, look: int) -> list[float]:
    """The five features the combiner had when this was measured (0.4.0, ``train.WITHOUT_LM``)."""
    from utils.turns.train import WITHOUT_LM, clip_words  # here: train imports extract, which imports this module

    return feature_vector(clip["p"][str(look)], look, clip_words(clip), Prosody(*clip["prosody"]), WITHOUT_LM)


def _shipped_and_view(clip: dict, look: int) -> list[float]:
    return [*_shipped(clip, look), clip_view(clip).ends_logit()]


def _view_silence_words(clip: dict, look: int) -> list[float]:
    """A smaller combiner around the view: it, the silence and the ``unfinished`` words."""
    from utils.turns.train import clip_words  # here: train imports extract, which imports this module

    return [clip_view(clip).ends_logit(), look / 1000.0, float(clip_words(clip).unfinished)]


def held_out_logits(clips: list[dict], row: Row, look: int | None = None) -> dict[str, float]:
    """Leave-one-speaker-out logit at ``look`` (default: the first look): train.py's fit (same
    looks, same steps) on the other speakers' clips, then the held-out speaker's."""
    from utils.turns import train  # here, not above: train imports extract, which imports this module

    def table(chosen: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(row(clip, trained_at), clip["complete"]) for clip in chosen for trained_at in train.TRAIN_LOOKS_MS]
        return np.array([x for x, _ in pairs], dtype=np.float64), np.array([float(y) for _, y in pairs])

    at = train.TRAIN_LOOKS_MS[0] if look is None else look
    out: dict[str, float] = {}
    for speaker in sorted({c["speaker"] for c in clips}):
        fitted = train.fit(*table([c for c in clips if c["speaker"] != speaker]))
        for clip in (c for c in clips if c["speaker"] == speaker):
            z = (np.array(row(clip, at)) - fitted["mean"]) / fitted["scale"]
            out[clip_key(clip)] = float(z @ np.array(fitted["weights"]) + fitted["bias"])
    return out


def threshold_for(cut_scores: list[float], max_cut: float = MAX_CUT_SHARE) -> float:
    """The lowest threshold (commit when a score is above it) that commits at most ``max_cut`` of
    these cut turns (the issue's "cut-offs <= 10 %")."""
    ranked = sorted(cut_scores, reverse=True)
    allowed = int(max_cut * len(ranked))
    return ranked[allowed] if allowed < len(ranked) else -math.inf


def operating_points(clips: list[dict], group: list[dict], scores: dict[str, float]) -> tuple[float, float, float]:
    """Complete turns committed (scored at whichever look ``scores`` were taken) with the threshold
    chosen on this group's own cut turns (optimistic); then complete and cut turns committed with
    each speaker's threshold chosen on the other speakers' cut turns (held out)."""
    complete = [c for c in group if c["complete"]]
    inside = threshold_for([scores[clip_key(c)] for c in group if not c["complete"]])
    own = sum(scores[clip_key(c)] > inside for c in complete) / len(complete)
    committed = {True: 0, False: 0}
    for clip in group:
        others = [scores[clip_key(c)] for c in clips if not c["complete"] and c["speaker"] != clip["speaker"]]
        committed[clip["complete"]] += scores[clip_key(clip)] > threshold_for(others)
    return own, committed[True] / len(complete), committed[False] / (len(group) - len(complete))


def combiner_table(clips: list[dict]) -> list[str]:
    methods = {
        "combiner (shipped 5 features)": held_out_logits(clips, _shipped),
        "combiner + ends_logit": held_out_logits(clips, _shipped_and_view),
        "ends_logit + silence + unfinished": held_out_logits(clips, _view_silence_words),
        "ends_logit alone (no fit)": {clip_key(c): clip_view(c).ends_logit() for c in clips},
    }
    lines = ["| clips | method | AUC | complete committed, threshold for <= 10 % cut on these clips | "
             "held-out threshold: complete committed | cut committed |", "|---|---|---|---|---|---|"]
    for name, group in _groups(clips):
        labels = [c["complete"] for c in group]
        for method, scores in methods.items():
            own, complete, cut = operating_points(clips, group, scores)
            lines.append(f"| {name} | {method} | {auc([scores[clip_key(c)] for c in group], labels):.2f} | {own:.0%} | "
                         f"{complete:.0%} | {cut:.0%} |")
    return lines


def cost(view: RecognizerView, clips: list[tuple[np.ndarray, str]]) -> list[str]:
    """Per turn on one thread: the encoder pass, the greedy decode, and one teacher-forced decoder
    pass over the same tokens (what a server that had the transcript's token ids would run), with
    how far the view read from that one pass lies from the greedy one's (int8 decoder, other
    batch shapes)."""
    encode, greedy, forced, drift = [], [], [], []
    for samples, lang in clips:
        start = time.perf_counter()
        cross = view.encode(samples)
        encoded = time.perf_counter()
        tokens, distributions = view.greedy(cross, lang)
        decoded = time.perf_counter()
        one_pass = view.teacher_forced(cross, lang, tokens)
        forced.append((time.perf_counter() - decoded) * 1000)
        encode.append((encoded - start) * 1000)
        greedy.append((decoded - encoded) * 1000)
        drift.append(abs(view.view(tokens, distributions).ends_logit() - view.view(tokens, one_pass).ends_logit()))
    return [f"cost per turn, one thread, {len(clips)} clips (median / max ms): encoder {statistics.median(encode):.0f}"
            f" / {max(encode):.0f}, greedy decode {statistics.median(greedy):.0f} / {max(greedy):.0f}, "
            f"teacher-forced decoder pass {statistics.median(forced):.0f} / {max(forced):.0f}",
            f"ends_logit, one teacher-forced pass against greedy steps: |difference| median "
            f"{statistics.median(drift):.2f}, max {max(drift):.2f}"]


def padding_study(model_dir: Path, human: list[tuple[np.ndarray, str, bool]], paddings: list[str]) -> list[str]:
    """The view recomputed (not cached) on the human clips (audio at the first look, language,
    complete) with other padding, e.g. ``200`` (that many frames of zeros) or ``300w`` (Whisper's
    own floor): AUC per language and the encoder's cost."""
    lines = ["| padding | AUC human | human en | human zh | encoder median / max ms |", "|---|---|---|---|---|"]
    for padding in paddings:
        view = RecognizerView(model_dir, pad_frames=int(padding.rstrip("w")), pad_as_whisper=padding.endswith("w"))
        scores: dict[str, tuple[list[float], list[bool]]] = {"en": ([], []), "zh": ([], [])}
        spent = []
        for samples, lang, complete in human:
            start = time.perf_counter()
            cross = view.encode(samples)
            spent.append((time.perf_counter() - start) * 1000)
            scores[lang][0].append(view.view(*view.greedy(cross, lang)).ends_logit())
            scores[lang][1].append(complete)
        both = (scores["en"][0] + scores["zh"][0], scores["en"][1] + scores["zh"][1])
        lines.append(f"| {padding} | {auc(*both):.2f} | {auc(*scores['en']):.2f} | {auc(*scores['zh']):.2f} | "
                     f"{statistics.median(spent):.0f} / {max(spent):.0f} |")
    return lines


def main() -> int:
    from utils.turns.corpus import build
    from utils.turns.extract import LOOKS_MS, TABLE, with_pause  # extract imports this module

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--models", type=Path, help="model cache with whisper-base/: also measure the cost")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kitt-stt" / "eot-corpus")
    parser.add_argument("--cost-clips", type=int, default=12)
    parser.add_argument("--paddings", nargs="*", default=[], metavar="FRAMES[w]",
                        help="with --models: recompute the view on the human clips with this padding (w: Whisper's)")
    args = parser.parse_args()
    clips = json.loads(args.table.read_text())["clips"]
    if any("view" not in c for c in clips):
        print(f"{args.table} has no recognizer view; run utils.turns.extract first", file=sys.stderr)
        return 1
    print("AUC of the recognizer's view alone (complete vs cut, no fit):\n")
    print("\n".join(alone_table(clips)))
    print("\n" + "\n".join(speaker_table(clips)))
    print("\n" + "\n".join(length_table(clips)))
    print("\nLeave-one-speaker-out, the combiner at the first look (train.py's fit; the view alone is not"
          " fitted):\n")
    print("\n".join(combiner_table(clips)))
    if args.models:
        corpus, _ = build(args.cache)
        step = max(1, len(corpus) // args.cost_clips)
        chosen = [(with_pause(c.samples, LOOKS_MS[0]), c.lang) for c in corpus[::step][: args.cost_clips]]
        print("\n" + "\n".join(cost(RecognizerView(args.models / "whisper-base"), chosen)))
        if args.paddings:
            human = [(with_pause(c.samples, LOOKS_MS[0]), c.lang, c.complete) for c in corpus if not c.synthetic]
            print("\n" + "\n".join(padding_study(args.models / "whisper-base", human, args.paddings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
