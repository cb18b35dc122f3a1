"""Train the fused end-of-turn combiner, deterministically, and check it on held-out clips.

A class-balanced, L2-regularised logistic regression fitted by full-batch gradient descent from
zeros for a fixed number of steps, so the same table gives the same weights on every run; they
are rounded and written to ``kitt_stt/turn/fused_weights.json``. On the clips of the feature table
(``utils/turns/extract.py``) each clip gives one sample per look (``TRAIN_LOOKS_MS`` of silence):
the model's p at that look, the silence, the words (from whisper-base's transcript) and the
prosody; the label is complete (1) or cut (0). Leave-one-speaker-out: for each speaker the same fit
without that speaker scores its clips (the comparisons, the report), and a calibration table
shows how the shipped weights' confidences on the clips match the labels.

    PYTHONPATH=. python -m utils.turns.train            # rewrites the shipped weights
    PYTHONPATH=. python -m utils.turns.train --check    # exit 1 if they would differ
    PYTHONPATH=. python -m utils.turns.train --compare  # held-out AUC of the candidate feature sets

The shipped weights (``features.FEATURES``: the text view and the Chinese offset) are fitted the
same way on the text view's development set (``text_dev.py``: the phrase table, complete and cut),
never on the clips, which stay the test set. The candidate sets that add the audio model's p and
the silence are fitted on the clips, held out by speaker, for the comparison: their weights on p
and silence came out near zero (docs/turns.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kitt_stt.turn.combiner import WEIGHTS_FILE, Combiner
from kitt_stt.turn.features import FEATURES, feature_vector
from kitt_stt.turn.prosody import Prosody
from kitt_stt.turn.words import WordEvidence, word_evidence
from utils.turns.extract import TABLE
from utils.turns.scores import auc, clip_key
from utils.turns.text_dev import TABLE as DEV_TABLE

TRAIN_LOOKS_MS = (100, 300, 600)
STEPS = 4000
LEARNING_RATE = 0.2
L2 = 0.02
DIGITS = 4
# the combiner without a text view (0.4.0's features), the baseline of the comparisons
WITHOUT_TEXT = ("model_logit", "silence_s", "unfinished", "complete_form", "pitch_final")
CANDIDATE_SETS: dict[str, tuple[str, ...]] = {
    "0.4.0 (no text view)": WITHOUT_TEXT,
    "0.4.0 + text_end": (*WITHOUT_TEXT, "text_end"),
    "model + text_end": ("model_logit", "text_end"),
    "model + silence + text_end": ("model_logit", "silence_s", "text_end"),
    "model + silence + text_end + unfinished": ("model_logit", "silence_s", "text_end", "unfinished"),
    "model + silence + text_end + complete_form": ("model_logit", "silence_s", "text_end", "complete_form"),
    "model + silence + text_end + words": ("model_logit", "silence_s", "text_end", "unfinished", "complete_form"),
    "model + silence + text_end + han": ("model_logit", "silence_s", "text_end", "han_text"),
    "model + silence + text_end + han + unfinished": ("model_logit", "silence_s", "text_end", "han_text", "unfinished"),
    "model + silence + text_end + han + words": ("model_logit", "silence_s", "text_end", "han_text", "unfinished",
                                                 "complete_form"),
    "text_end + han": ("text_end", "han_text"),
    "text_end alone": ("text_end",),
}
COMPARE_GROUPS: dict[str, Callable[[dict], bool]] = {
    "human en": lambda c: not c["synthetic"] and c["lang"] == "en",
    "human en, word cuts": lambda c: not c["synthetic"] and c["lang"] == "en" and c.get("cut") != "pause",
    "human en, pause cuts": lambda c: not c["synthetic"] and c["lang"] == "en" and c.get("cut") != "word",
    "human zh": lambda c: not c["synthetic"] and c["lang"] == "zh",
    "all human": lambda c: not c["synthetic"],
}


def clip_words(clip: dict) -> WordEvidence:
    """The words' evidence with the text view's log-odds as extract.py cached it: training and the
    studies need no text model installed."""
    def cached(_text: str) -> float | None:
        return clip["text_end"]

    return word_evidence(clip["text"], cached)


def samples(clips: list[dict], features: tuple[str, ...] = FEATURES
            ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """(features, labels, (clip index, look) per row)."""
    rows, labels, keys = [], [], []
    for index, clip in enumerate(clips):
        words = clip_words(clip)
        prosody = Prosody(*clip["prosody"])
        for look in TRAIN_LOOKS_MS:
            rows.append(feature_vector(clip["p"][str(look)], look, words, prosody, features))
            labels.append(1.0 if clip["complete"] else 0.0)
            keys.append((index, look))
    return np.array(rows, dtype=np.float64), np.array(labels), keys


def fit(x: np.ndarray, y: np.ndarray) -> dict:
    """Standardise, then gradient descent on the class-balanced log loss plus L2; rounded. The
    caller names the columns (``{"features": ..., **fit(x, y)}``): it knows what it stacked.
    A NaN entry is "no opinion" and is fitted as the column's mean, as the combiner scores it."""
    mean = np.round(np.nanmean(x, axis=0), DIGITS)
    spread = np.round(np.nanstd(x, axis=0), DIGITS)
    scale = np.where(spread > 0, spread, 1.0)  # checked after rounding: a tiny spread must not round to 0
    # NaN is "no opinion" (the text view without words): the mean, as the combiner scores it
    z = np.nan_to_num((x - mean) / scale, nan=0.0)
    positives = max(1.0, float(y.sum()))
    negatives = max(1.0, float(len(y) - y.sum()))
    sample_weight = np.where(y > 0.5, len(y) / (2 * positives), len(y) / (2 * negatives))
    weights = np.zeros(z.shape[1])
    bias = 0.0
    for _ in range(STEPS):
        predicted = 1.0 / (1.0 + np.exp(-(z @ weights + bias)))
        error = (predicted - y) * sample_weight
        weights -= LEARNING_RATE * (z.T @ error / len(y) + L2 * weights)
        bias -= LEARNING_RATE * float(error.mean())
    return {"mean": [float(v) for v in mean], "scale": [float(v) for v in scale],
            "weights": [round(float(w), DIGITS) for w in weights], "bias": round(bias, DIGITS)}


def leave_one_speaker_out(clips: list[dict], features: tuple[str, ...] = FEATURES,
                          text_absent: bool = False) -> dict[str, dict[str, float]]:
    """Held-out confidence per clip name and look, each from a fit without the clip's speaker.
    ``text_absent``: score the held-out clips as a server without the text view would (no opinion)."""
    out: dict[str, dict[str, float]] = {}
    for speaker in sorted({clip["speaker"] for clip in clips}):
        train = [clip for clip in clips if clip["speaker"] != speaker]
        held = [{**clip, "text_end": None} if text_absent else clip for clip in clips if clip["speaker"] == speaker]
        combiner = Combiner.from_dict({"features": list(features), **fit(*samples(train, features)[:2])})
        x, _, keys = samples(held, features)
        for row, (index, look) in zip(x, keys, strict=True):
            clip = held[index]
            out.setdefault(clip_key(clip), {})[str(look)] = round(
                combiner.score(list(row)).confidence, 6)
    return out


def calibration(clips: list[dict], oof: dict[str, dict[str, float]], look: int = 100) -> list[str]:
    """Held-out confidence at the first look, in five bins, against the share of complete turns."""
    pairs = [(oof[clip_key(c)][str(look)], c["complete"]) for c in clips]
    lines = ["| held-out confidence | clips | complete share | mean confidence |", "|---|---|---|---|"]
    edges = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0001]
    gap = 0.0
    for lo, hi in itertools.pairwise(edges):
        chosen = [(q, c) for q, c in pairs if lo <= q < hi]
        if not chosen:
            lines.append(f"| {lo:.1f}-{min(hi, 1.0):.1f} | 0 | - | - |")
            continue
        share = sum(c for _, c in chosen) / len(chosen)
        mean = sum(q for q, _ in chosen) / len(chosen)
        gap += len(chosen) * abs(share - mean)
        lines.append(f"| {lo:.1f}-{min(hi, 1.0):.1f} | {len(chosen)} | {share:.2f} | {mean:.2f} |")
    lines.append(f"\nexpected calibration error (5 bins): {gap / len(pairs):.3f}")
    return lines


def compare(clips: list[dict]) -> list[str]:
    """Held-out (leave-one-speaker-out) AUC at the first look of each candidate feature set, per
    group; a group's complete turns against its cut ones (of one kind, where it says so)."""
    lines = ["| features | " + " | ".join(COMPARE_GROUPS) + " |", "|---" * (len(COMPARE_GROUPS) + 1) + "|"]
    for name, features in CANDIDATE_SETS.items():
        oof = leave_one_speaker_out(clips, features)
        cells = []
        for member in COMPARE_GROUPS.values():
            chosen = [c for c in clips if member(c)]
            scores = [oof[clip_key(c)]["100"] for c in chosen]
            cells.append(f"{auc(scores, [c['complete'] for c in chosen]):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def dev_samples(rows: list[dict], features: tuple[str, ...] = FEATURES) -> tuple[np.ndarray, np.ndarray]:
    """The text view's development set (``text_dev.py``'s cached scores) as features and labels,
    built as the policy builds them at the pause (the audio model unknown, the silence 100 ms)."""
    vectors = [feature_vector(None, 100, word_evidence(row["text"], lambda _text, row=row: row["text_end"]),
                              Prosody(0.0, 0.0, 0.0, 0.0), features) for row in rows]
    return np.array(vectors, dtype=np.float64), np.array([1.0 if row["complete"] else 0.0 for row in rows])


def weights_text(rows: list[dict]) -> str:
    """The shipped weights: fitted on the text view's development set, not on the clips (the test set)."""
    data = {"features": list(FEATURES), **fit(*dev_samples(rows))}
    data["trained_on"] = (f"{len(rows)} texts of the phrase table, complete and cut half way "
                          "(utils/turns/text_dev.py, utils/turns/train.py)")
    return json.dumps(data, indent=1) + "\n"


def shipped_scores(clips: list[dict], combiner: Combiner, text_absent: bool = False) -> dict[str, dict[str, float]]:
    """The shipped weights' confidence per clip and look: held out by construction (fitted on the
    phrase table, never on a clip). ``text_absent``: as a server without the text view scores them."""
    scored = [{**clip, "text_end": None} if text_absent else clip for clip in clips]
    x, _, keys = samples(scored, combiner.features)
    out: dict[str, dict[str, float]] = {}
    for row, (index, look) in zip(x, keys, strict=True):
        out.setdefault(clip_key(scored[index]), {})[str(look)] = round(combiner.score(list(row)).confidence, 6)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE)
    parser.add_argument("--check", action="store_true", help="only compare with --out; exit 1 if different")
    parser.add_argument("--compare", action="store_true",
                        help="only print the candidate feature sets' held-out AUC on the clips (fitted by speaker)")
    args = parser.parse_args()
    clips = json.loads(args.table.read_text())["clips"]
    if args.compare:
        print("\n".join(compare(clips)))
        return 0
    text = weights_text(json.loads(DEV_TABLE.read_text()))
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print("weights regenerate bit for bit" if same else f"{args.out} differs from a fresh fit")
        return 0 if same else 1
    args.out.write_text(text)
    print(f"wrote {args.out}; on the clips (the test set):")
    print("\n".join(calibration(clips, shipped_scores(clips, Combiner.from_dict(json.loads(text))))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
