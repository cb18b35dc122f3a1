"""How far is each family of signals from issue 23's targets, on speakers it was not fitted on?

The targets: complete turns committed at p50 <= 400 ms and p95 <= 1,000 ms after the end of
speech, with at most 10 % of the cut turns committed inside a 1.5 s thinking pause. What a
policy has committed after T ms of silence is a choice made from what it knew by then, and a
look at S ms commits at S + 50 ms (one TurnSense run). So, by nearest rank, the p50 needs at
least half of the complete turns (11 of 21) committed by the 300 ms look, and the p95 at least
95 % of them (20 of 21) by a look at 950 ms at the latest, for which the table's 1000 ms look
stands in (50 ms more silence heard: slightly generous); silence alone cannot help before
1.5 s, since every cut turn here pauses that long. The table gives one rule at one look; a
policy that may commit at several looks spends the same 10 % across all of them.

Each family is fitted as the shipped combiner is (``train.fit``: the training looks stacked,
class-balanced, the same steps), without the scored clip's speaker, and scored at the look
(``recognizer_view.held_out_logits``); the recognizer's view alone is read as it is (no fit).
Then, as ``recognizer_view.operating_points``: the share of complete turns above the threshold
that lets 10 % of this group's own held-out cut turns through (a threshold the deployer could
not know: the best this ranking allows), and above each speaker's threshold set on the other
speakers' held-out cut turns, with the cut share that lets through.

    PYTHONPATH=. python -m utils.turns.targets     # the table in docs/turns.md, ~1 min

Reads only the feature table (``extract.py``): no model, no LM.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from kitt_stt.turn.features import FEATURES, feature_values
from kitt_stt.turn.prosody import Prosody
from kitt_stt.turn.words import word_evidence
from utils.turns import train
from utils.turns.extract import TABLE
from utils.turns.recognizer_view import Row, View, held_out_logits, operating_points
from utils.turns.scores import auc, clip_key

TARGET_LOOKS_MS = {300: 50, 1000: 95}  # look -> the percentile of complete turns it must commit
PROSODY_EXTRA = ("pitch_slope", "energy_slope", "final_lengthening")  # the prosody the combiner leaves out
GROUP_NAMES = ("human en", "human en, word cuts", "all human")


def _values(clip: dict, look: int) -> dict[str, float]:
    def cached_sentence_end(_text: str) -> float:  # as extract.py cached it: no LM needed here
        return float(clip["sentence_end"])

    return feature_values(clip["p"][str(look)], look, word_evidence(clip["text"], cached_sentence_end),
                          Prosody(*clip["prosody"]))


def _named(names: tuple[str, ...]) -> Row:
    """A family of the combiner's own candidate features (``features.KINDS``), by name."""
    return lambda clip, look: [_values(clip, look)[name] for name in names]


def _with_view(clip: dict, look: int) -> list[float]:
    """The shipped features plus the recognizer's view (whisper-base's decoder, ~370 ms a turn)."""
    return [*_named(FEATURES)(clip, look), View(**clip["view"]).ends_logit()]


FAMILIES: dict[str, Row] = {
    "model's p + silence": _named(("model_logit", "silence_s")),
    "shipped features (p, silence, words, LM, final pitch)": _named(FEATURES),
    "shipped + all prosody": _named((*FEATURES, *PROSODY_EXTRA)),
    "shipped + recognizer's view (~370 ms a turn)": _with_view,
}
VIEW_ALONE = "recognizer's view alone (no fit; ~370 ms a turn)"


def needed(complete_turns: int, percentile: int) -> int:
    """Complete turns that must commit by a look for the percentile to fall there (nearest rank,
    as the reports compute percentiles)."""
    return max(1, math.ceil(percentile / 100.0 * complete_turns))


def held_out_scores(clips: list[dict], look: int) -> dict[str, dict[str, float]]:
    """Per family, every clip's held-out score at ``look``."""
    scores = {name: held_out_logits(clips, row, look) for name, row in FAMILIES.items()}
    scores[VIEW_ALONE] = {clip_key(c): View(**c["view"]).ends_logit() for c in clips}
    return scores


def table(clips: list[dict]) -> list[str]:
    by_look = {look: held_out_scores(clips, look) for look in TARGET_LOOKS_MS}
    header = " | ".join(f"by the {look} ms look (p{percentile}): own threshold | speakers' thresholds (cut let through)"
                        for look, percentile in TARGET_LOOKS_MS.items())
    lines = [f"| clips | signals | AUC at 100 ms | {header} |",
             "|---|---|---" + "|---|---" * len(TARGET_LOOKS_MS) + "|"]
    first_look = held_out_scores(clips, train.TRAIN_LOOKS_MS[0])
    for group_name in GROUP_NAMES:
        group = [clip for clip in clips if train.COMPARE_GROUPS[group_name](clip)]
        complete = sum(clip["complete"] for clip in group)
        if complete == 0 or complete == len(group):
            continue  # another table without both kinds here: nothing to set apart
        wanted = ", ".join(f"{needed(complete, p)} by {look} ms" for look, p in TARGET_LOOKS_MS.items())
        labels = [clip["complete"] for clip in group]
        for family in [*FAMILIES, VIEW_ALONE]:
            cells = [f"{auc([first_look[family][clip_key(c)] for c in group], labels):.2f}"]
            for look in TARGET_LOOKS_MS:
                own, spoken, cut = operating_points(clips, group, by_look[look][family])
                cells.append(f"{round(own * complete)} | {round(spoken * complete)} ({cut:.0%})")
            lines.append(f"| {group_name}: {complete} complete (needed: {wanted}), {len(group) - complete} cut | "
                         f"{family} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    args = parser.parse_args()
    clips = json.loads(args.table.read_text())["clips"]
    print("Complete turns committed, held out, at a threshold that lets 10 % of the cut turns through"
          " (own: chosen on this group's cut turns; speakers': each on the other speakers').\n")
    print("\n".join(table(clips)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
