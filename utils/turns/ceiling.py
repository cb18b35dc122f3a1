"""How close can any weighing of the measured signals come to issue 23's targets on this set?

The targets: complete turns committed at p50 <= 400 ms and p95 <= 1,000 ms after the end of
speech, with at most 10 % of cut turns committed inside a 1.5 s thinking pause. Whatever a
policy does (commit, look again, hold, time out), the turns it has committed after T ms of
silence are a choice made from what it knew by then, so the targets ask for two rules: by
T = 350 ms (a look at 300 ms and its model run) one that picks >= 50 % of the complete turns
and <= 10 % of the cut ones, and by T = 950 ms one that picks >= 95 % of the complete turns at
the same <= 10 %. The silence itself cannot tell them apart before 1.5 s: every cut turn here
pauses that long.

For each family of signals this fits the combiner's logistic regression (``train.fit``) **on
the very clips it then scores**, sweeps how much a cut-off costs and the L2 on them too, and
keeps the best share of complete turns above the threshold that commits at most 10 % of the
cut ones: an optimistic ceiling for a linear rule over those signals, not an estimate of what
a server would do (that is the held-out column: a fit without the clip's speaker, its
threshold chosen on the other speakers' cut turns). Families: the model's p at this look and
every earlier one; the words (``unfinished``, ``complete_form``, the trigram LM's
``sentence_end``); the prosody (all four readings); the recognizer's own view (five readings
of whisper-base's decoder, ``recognizer_view.py``, about 370 ms of one core per turn, outside
the issue's 10 ms budget); the speech's length (cut turns are shorter by construction, so
this one learns the corpus).

    PYTHONPATH=. python -m utils.turns.ceiling     # the table in docs/turns.md, ~1 min

Reads only the feature table (``extract.py``): no model, no LM.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kitt_stt.turn.features import feature_values
from kitt_stt.turn.prosody import Prosody
from kitt_stt.turn.words import word_evidence
from utils.turns import train
from utils.turns.extract import TABLE
from utils.turns.recognizer_view import View, threshold_for
from utils.turns.scores import clip_key

LOOKS_MS = (100, 300, 600, 1000)
NEGATIVE_WEIGHTS = (1.0, 2.0, 4.0, 8.0, 16.0)
L2S = (train.L2, 0.002, 0.0)
NEEDED = {300: 0.50, 600: 0.95}  # p50 <= 400 ms by the 300 ms look; p95 <= 1,000 ms by the 600 ms one
PROSODY = ("pitch_final", "pitch_slope", "energy_slope", "final_lengthening")

Family = Callable[[dict, int], list[float]]


def _values(clip: dict, look: int) -> dict[str, float]:
    def cached_sentence_end(_text: str) -> float:  # as extract.py cached it: no LM needed here
        return float(clip["sentence_end"])

    words = word_evidence(clip["text"], cached_sentence_end)
    return feature_values(clip["p"][str(look)], look, words, Prosody(*clip["prosody"]))


def _audio(clip: dict, look: int) -> list[float]:
    """The model's p (as the combiner's logit) at this look and every earlier one."""
    return [_values(clip, earlier)["model_logit"] for earlier in LOOKS_MS if earlier <= look]


def _words(clip: dict, look: int) -> list[float]:
    values = _values(clip, look)
    return [values["unfinished"], values["complete_form"], values["sentence_end"]]


def _prosody(clip: dict, look: int) -> list[float]:
    values = _values(clip, look)
    return [values[name] for name in PROSODY]


def _view(clip: dict, _look: int) -> list[float]:
    view = View(**clip["view"])
    return [view.ends_logit(), view.p_final, view.p_eot, view.p_word, view.p_going_on]


def _length(clip: dict, _look: int) -> list[float]:
    return [clip["speech_ms"] / 1000.0]


def _joined(*parts: Family) -> Family:
    return lambda clip, look: [value for part in parts for value in part(clip, look)]


FAMILIES: dict[str, Family] = {
    "model's p": _audio,
    "p + words (LM included)": _joined(_audio, _words),
    "p + words + prosody (all the server can afford)": _joined(_audio, _words, _prosody),
    "+ recognizer's view (~370 ms a turn)": _joined(_audio, _words, _prosody, _view),
    "+ view + speech length (learns the corpus)": _joined(_audio, _words, _prosody, _view, _length),
}
GROUPS: dict[str, Callable[[dict], bool]] = {
    "human en": lambda c: not c["synthetic"] and c["lang"] == "en",
    "human en, word cuts": lambda c: not c["synthetic"] and c["lang"] == "en" and c["cut"] != "pause",
    "all human": lambda c: not c["synthetic"],
}


def _scores(fitted: dict, x: np.ndarray) -> np.ndarray:
    return ((x - np.array(fitted["mean"])) / np.array(fitted["scale"])) @ np.array(fitted["weights"]) + fitted["bias"]


def committed_at_cut_budget(scores: list[float], complete: list[bool]) -> tuple[float, float]:
    """(complete, cut) shares above the lowest threshold that commits at most 10 % of the cut turns."""
    threshold = threshold_for([s for s, c in zip(scores, complete, strict=True) if not c])
    above = [s > threshold for s in scores]
    n_complete = sum(complete)
    return (float(sum(a for a, c in zip(above, complete, strict=True) if c) / n_complete),
            float(sum(a for a, c in zip(above, complete, strict=True) if not c) / (len(complete) - n_complete)))


def in_sample_ceiling(group: list[dict], family: Family, look: int) -> tuple[float, float]:
    """The best (complete, cut) over the sweep, each fit trained and thresholded on ``group`` itself."""
    x = np.array([family(clip, look) for clip in group], dtype=np.float64)
    y = np.array([float(clip["complete"]) for clip in group])
    labels = [clip["complete"] for clip in group]
    best = (0.0, 0.0)
    for negative_weight, l2 in itertools.product(NEGATIVE_WEIGHTS, L2S):
        fitted = train.fit(x, y, tuple(f"f{i}" for i in range(x.shape[1])), negative_weight, l2)
        best = max(best, committed_at_cut_budget(list(_scores(fitted, x)), labels), key=lambda pair: pair[0])
    return best


def held_out(clips: list[dict], group: list[dict], family: Family, look: int) -> tuple[float, float]:
    """(complete, cut) committed by shipped-style fits without each clip's speaker, each speaker's
    threshold chosen on the other speakers' cut turns (``clips``: every clip, synthetic included)."""
    scores: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    for speaker in sorted({clip["speaker"] for clip in group}):
        others = [clip for clip in clips if clip["speaker"] != speaker]
        x = np.array([family(clip, look) for clip in others], dtype=np.float64)
        fitted = train.fit(x, np.array([float(clip["complete"]) for clip in others]),
                           tuple(f"f{i}" for i in range(x.shape[1])))
        thresholds[speaker] = threshold_for([s for s, clip in zip(_scores(fitted, x), others, strict=True)
                                             if not clip["complete"]])
        for clip in (c for c in group if c["speaker"] == speaker):
            scores[clip_key(clip)] = float(_scores(fitted, np.array([family(clip, look)], dtype=np.float64))[0])
    committed = {True: 0, False: 0}
    for clip in group:
        committed[clip["complete"]] += scores[clip_key(clip)] > thresholds[clip["speaker"]]
    n_complete = sum(clip["complete"] for clip in group)
    return committed[True] / n_complete, committed[False] / (len(group) - n_complete)


def table(clips: list[dict], looks: tuple[int, ...] = LOOKS_MS) -> list[str]:
    header = " | ".join(f"look {look} ms: in-sample ceiling | held-out" for look in looks)
    lines = [f"| clips | signals | {header} |", "|---|---" + "|---|---" * len(looks) + "|"]
    for (group_name, member), (family_name, family) in itertools.product(GROUPS.items(), FAMILIES.items()):
        group = [clip for clip in clips if member(clip)]
        n_complete = sum(clip["complete"] for clip in group)
        cells = []
        for look in looks:
            ceiling, ceiling_cut = in_sample_ceiling(group, family, look)
            complete, cut = held_out(clips, group, family, look)
            cells.append(f"{ceiling:.0%} ({ceiling_cut:.0%}) | {complete:.0%} ({cut:.0%})")
        lines.append(f"| {group_name}: {n_complete} complete, {len(group) - n_complete} cut | {family_name} | "
                     + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    args = parser.parse_args()
    clips = json.loads(args.table.read_text())["clips"]
    print("Share of complete turns committed (share of cut turns committed), at the threshold that commits"
          " at most 10 % of the cut turns. Needed: "
          + ", ".join(f">= {share:.0%} by the {look} ms look" for look, share in NEEDED.items()) + ".\n")
    print("\n".join(table(clips)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
