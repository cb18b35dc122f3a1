"""How far is each family of signals from issue 23's targets, on speakers it was not fitted on?

The targets: complete turns committed at p50 <= 400 ms and p95 <= 1,000 ms after the end of
speech, with at most 10 % of the cut turns committed inside a 1.5 s thinking pause. A look at
S ms commits at S + 50 ms (one TurnSense run), so by nearest rank the p50 needs at least half
of the complete turns (11 of 21) committed by a look at 350 ms, for which the table's 300 ms
look stands in (50 ms less silence heard: slightly strict), and the p95 95 % of them (20 of 21)
by a look at 950 ms, for which the 1000 ms look stands in (slightly generous). Silence alone
cannot help before 1.5 s: every cut turn here pauses that long.

Each cell is one rule at one look, which is what a policy that commits at one look is; a policy
that may commit at several looks commits the union of its rules (and may weigh the earlier
looks' answers), so the table is not a bound on every such policy, only on the ones measured.
Families fitted as the shipped combiner is (``train.fit``: the training looks stacked,
class-balanced, the same steps) are fitted without the scored clip's speaker and scored at the
look (``recognizer_view.held_out_logits``); single signals are read as they are, their sign set
by what they mean (no fit). Then, as ``recognizer_view.operating_points``: complete turns above
the threshold that lets 10 % of this group's own cut turns through (a threshold a deployer could
not know: the best this ranking allows), and above each speaker's threshold set on the other
speakers' cut turns (every other clip, synthetic and Mandarin included, each scored held out),
with the share of cut turns that lets through.

    PYTHONPATH=. python -m utils.turns.targets     # the table in docs/turns.md, ~10 s

Reads only the feature table (``extract.py``): no model, no LM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from kitt_stt.turn.combiner import load_combiner
from kitt_stt.turn.features import FEATURES, feature_values
from kitt_stt.turn.prosody import Prosody
from utils.performance.toolkit.stats import nearest_rank_position
from utils.turns import train
from utils.turns.extract import TABLE
from utils.turns.recognizer_view import Row, clip_view, held_out_logits, operating_points
from utils.turns.scores import auc, clip_key

TARGET_LOOKS_MS = {300: 50, 1000: 95}  # look -> the percentile of complete turns it must commit
PROSODY_EXTRA = ("pitch_slope", "energy_slope", "final_lengthening")  # the prosody the combiner leaves out
GROUP_NAMES = ("human en", "human en, word cuts", "human en, pause cuts", "all human")


def _values(clip: dict, look: int) -> dict[str, float]:
    """Every candidate feature of the clip at the look, from the table alone."""
    return feature_values(clip["p"][str(look)], look, train.clip_words(clip), Prosody(*clip["prosody"]))


def _named(names: tuple[str, ...]) -> Row:
    """A family of the combiner's own candidate features (``features.KINDS``), by name."""
    def row(clip: dict, look: int) -> list[float]:
        values = _values(clip, look)
        return [values[name] for name in names]

    return row


FUSED = ("model_logit", "silence_s", *FEATURES)  # the audio model and the silence with the text view


def _with_view(clip: dict, look: int) -> list[float]:
    """p, silence and the text view plus the recognizer's view (whisper-base's decoder, ~370 ms a turn)."""
    return [*_named(FUSED)(clip, look), clip_view(clip).ends_logit()]


def _shipped(clip: dict, look: int) -> float:
    """The shipped weights' confidence: fitted on the phrase table, so every clip is held out."""
    combiner = load_combiner()
    return combiner.score([_values(clip, look)[name] for name in combiner.features]).confidence


FITTED: dict[str, Row] = {
    "model's p + silence": _named(("model_logit", "silence_s")),
    "p + silence + text view": _named(FUSED),
    "p + silence + text view + all prosody": _named((*FUSED, "pitch_final", *PROSODY_EXTRA)),
    "p + silence + text view + recognizer's view (~370 ms a turn)": _with_view,
}
VIEW_ALONE = "recognizer's view alone (~370 ms a turn)"
# single signals, no fit: the higher, the likelier the turn is over
ALONE: dict[str, Callable[[dict, int], float]] = {
    "shipped weights (text view, fitted on the phrase table)": _shipped,
    "TurnSense p alone": lambda clip, look: clip["p"][str(look)],
    "text view alone": lambda clip, _look: -99.0 if clip["text_end"] is None else float(clip["text_end"]),
    "falling final pitch alone": lambda clip, look: -_values(clip, look)["pitch_final"],
    VIEW_ALONE: lambda clip, _look: clip_view(clip).ends_logit(),
}


def needed(complete_turns: int, percentile: int) -> int:
    """Complete turns that must commit by a look for the percentile to fall there."""
    return nearest_rank_position(complete_turns, percentile)


def held_out_scores(clips: list[dict], look: int) -> dict[str, dict[str, float]]:
    """Per family (fitted or alone), every clip's score at ``look``, fitted ones held out."""
    scores = {name: held_out_logits(clips, row, look) for name, row in FITTED.items()}
    scores.update({name: {clip_key(c): read(c, look) for c in clips} for name, read in ALONE.items()})
    return scores


def table(clips: list[dict]) -> list[str]:
    """One row per group and family: the first look's AUC, then per target look the complete
    turns committed at the group's own threshold and at the speakers' thresholds (with the cut
    share those let through)."""
    by_look = {look: held_out_scores(clips, look) for look in TARGET_LOOKS_MS}
    first_look = held_out_scores(clips, train.TRAIN_LOOKS_MS[0])
    header = " | ".join(f"by the {look} ms look (p{percentile}): own threshold | speakers' thresholds (cut let through)"
                        for look, percentile in TARGET_LOOKS_MS.items())
    lines = [f"| clips | signals | AUC at 100 ms | {header} |",
             "|---|---|---" + "|---|---" * len(TARGET_LOOKS_MS) + "|"]
    for group_name in GROUP_NAMES:
        group = [clip for clip in clips if train.COMPARE_GROUPS[group_name](clip)]
        complete = sum(clip["complete"] for clip in group)
        if complete == 0 or complete == len(group):
            continue  # another table without both kinds here: nothing to set apart
        wanted = ", ".join(f"{needed(complete, p)} by {look} ms" for look, p in TARGET_LOOKS_MS.items())
        labels = [clip["complete"] for clip in group]
        for family in [*FITTED, *ALONE]:
            cells = [f"{auc([first_look[family][clip_key(c)] for c in group], labels):.2f}"]
            for look in TARGET_LOOKS_MS:
                own, spoken, cut = operating_points(clips, group, by_look[look][family])
                cells.append(f"{round(own * complete)} | {round(spoken * complete)} ({cut:.0%})")
            lines.append(f"| {group_name}: {complete} complete (needed: {wanted}), {len(group) - complete} cut | "
                         f"{family} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    """Print the table for the shipped feature table, or another one (``--table``)."""
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
