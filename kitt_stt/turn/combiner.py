"""The fused decision's combiner: a logistic regression over ``features.FEATURES``.

Its weights are a small JSON file (``fused_weights.json``) written by ``utils/turns/train.py``
from the labelled set; that script regenerates the file bit for bit. Inputs are standardised with
the training set's means and scales stored beside the weights, so the weights read as "logit per
standard deviation". Scoring is a dot product of ten numbers: microseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kitt_stt.turn.features import FEATURES, GROUPS

WEIGHTS_FILE = Path(__file__).resolve().parent / "fused_weights.json"


class CombinerError(Exception):
    """The weights file does not fit the features this code builds."""


@dataclass(frozen=True)
class Score:
    confidence: float  # probability that the turn is over
    contributions: dict[str, float]  # logit contribution of each kind of evidence (model, silence, words, prosody)

    def decided_by(self, committed: bool) -> str:
        """The kind of evidence that pushed hardest towards what was decided."""
        sign = 1.0 if committed else -1.0
        return max(self.contributions, key=lambda group: sign * self.contributions[group])


@dataclass(frozen=True)
class Combiner:
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    @classmethod
    def from_dict(cls, data: dict) -> Combiner:
        if tuple(data.get("features", ())) != FEATURES:
            raise CombinerError(f"weights are for features {data.get('features')}, this code builds {FEATURES}")
        return cls(tuple(data["mean"]), tuple(data["scale"]), tuple(data["weights"]), float(data["bias"]))

    def score(self, vector: list[float]) -> Score:
        contributions: dict[str, float] = {}
        total = self.bias
        for value, mean, scale, weight, group in zip(vector, self.mean, self.scale, self.weights, GROUPS, strict=True):
            part = weight * (value - mean) / scale
            contributions[group] = contributions.get(group, 0.0) + part
            total += part
        return Score(1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, total)))), contributions)


@lru_cache(maxsize=4)
def load_combiner(path: Path = WEIGHTS_FILE) -> Combiner:
    """The combiner in ``path``; ``CombinerError`` with the reason when it cannot be used."""
    try:
        return Combiner.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, CombinerError) as exc:
        raise CombinerError(f"{path}: not usable end-of-turn weights: {exc}") from None
