"""The ceiling study (utils/turns/ceiling.py): how close the measured signals can come to issue
23's targets even when a rule is fitted and thresholded on the very clips it scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from utils.turns.ceiling import FAMILIES, GROUPS, NEEDED, committed_at_cut_budget, held_out, in_sample_ceiling
from utils.turns.extract import TABLE


def _toy(values: list[float], complete: list[bool]) -> list[dict]:
    return [{"x": value, "complete": label, "speaker": f"s{i % 4}", "name": str(i)}
            for i, (value, label) in enumerate(zip(values, complete, strict=True))]


def _x(clip: dict, _look: int) -> list[float]:
    return [clip["x"]]


def test_the_cut_budget_admits_a_tenth_of_the_cut_turns_and_counts_the_complete_ones_above_it() -> None:
    scores = [float(v) for v in range(20)] + [25.0, 30.0, 1.0, 2.0]  # 20 cut turns, 4 complete ones
    complete = [False] * 20 + [True] * 4
    # the threshold is the third-highest cut score (17): two cut turns and the two high complete turns above it
    assert committed_at_cut_budget(scores, complete) == (0.5, 0.1)


def test_a_signal_that_separates_reaches_every_complete_turn_and_noise_does_not() -> None:
    rng = np.random.default_rng(7)
    complete = [bool(i % 2) for i in range(60)]
    separating = _toy([1.0 + rng.random() if c else -1.0 - rng.random() for c in complete], complete)
    assert in_sample_ceiling(separating, _x, 100) == (1.0, 0.1)  # the lowest threshold: it spends the budget
    noise = _toy(list(rng.normal(size=60)), complete)
    share, cut = in_sample_ceiling(noise, _x, 100)
    assert share < 0.6 and cut <= 0.1


def test_held_out_scores_each_speaker_with_a_fit_and_threshold_from_the_others() -> None:
    complete = [i % 8 < 4 for i in range(80)]  # every speaker (i % 4) has complete and cut turns
    clips = _toy([2.0 + i / 100 if c else -2.0 - i / 100 for i, c in enumerate(complete)], complete)
    share, cut = held_out(clips, clips, _x, 100)
    # each threshold spends the other speakers' 10 % budget, so about a tenth of the held-out cuts pass too
    assert share == 1.0 and 0.0 < cut < 0.2
    # a speaker whose signal is the reverse of everyone else's is scored by the others' fit: all wrong
    for clip in clips:
        if clip["speaker"] == "s1":
            clip["x"] = -3.0 * clip["x"]
    share, cut = held_out(clips, [c for c in clips if c["speaker"] == "s1"], _x, 100)
    assert share == 0.0 and cut == 1.0


@pytest.mark.parametrize("family", ["p + words + prosody (all the server can afford)",
                                    "+ recognizer's view (~370 ms a turn)"])
def test_on_the_shipped_table_no_signal_reaches_the_share_the_p95_target_needs(family: str) -> None:
    """docs/turns.md ("How far from the targets"): even fitted on the human English clips themselves,
    the 600 ms look commits far fewer than the 95 % of complete turns the p95 target needs."""
    clips = [c for c in json.loads(TABLE.read_text())["clips"] if GROUPS["human en"](c)]
    share, cut = in_sample_ceiling(clips, FAMILIES[family], 600)
    assert cut <= 0.1
    assert share < NEEDED[600] - 0.1
