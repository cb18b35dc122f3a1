"""The fused decision's combiner: a logistic regression over named features (``features.KINDS``).

Its weights are a small JSON file (``fused_weights.json``) written by ``utils/turns/train.py``
from the labelled set; that script regenerates the file bit for bit. The file names its features,
so a re-fit on other recordings may choose other candidates without a code change. Inputs are standardised with
the training set's means and scales stored beside the weights, so the weights read as "logit per
standard deviation". Scoring is a dot product of a dozen numbers: microseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from kitt_stt.turn.features import EVIDENCE_KINDS, FEATURES, KINDS

WEIGHTS_FILE = Path(__file__).resolve().parent / "fused_weights.json"


class CombinerError(Exception):
    """The weights file does not fit the features this code builds."""


@dataclass(frozen=True)
class Score:
    confidence: float  # probability that the turn is over
    contributions: dict[str, float]  # logit contribution of each kind of evidence (model, silence, words, prosody)
    weighed: tuple[str, ...]  # the kinds the weights weigh: only they can have decided

    def decided_by(self, committed: bool) -> str:
        """The weighed kind of evidence that pushed hardest towards what was decided (a kind the
        weights leave out contributes 0 and never decided, even when every weighed one pushed the
        other way)."""
        sign = 1.0 if committed else -1.0
        return max(self.weighed, key=lambda group: sign * self.contributions[group])


@dataclass(frozen=True)
class Combiner:
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    features: tuple[str, ...] = FEATURES  # the names of the vector's entries, in order

    @classmethod
    def from_dict(cls, data: dict) -> Combiner:
        features = tuple(data.get("features", ()))
        unknown = [name for name in features if name not in KINDS]
        if not features or unknown:
            raise CombinerError(f"weights name features {unknown or 'none'} that this code does not build "
                                f"(it builds {sorted(KINDS)})")
        if len(set(features)) != len(features):
            raise CombinerError(f"weights name a feature twice: {list(features)}")
        mean, scale, weights = (tuple(float(v) for v in data[key]) for key in ("mean", "scale", "weights"))
        if not len(mean) == len(scale) == len(weights) == len(features):
            raise CombinerError("weights: mean, scale and weights need one entry per feature")
        bias = float(data["bias"])
        # JSON readers accept NaN and Infinity: a NaN weight would commit every turn at once
        if not all(math.isfinite(v) for v in (*mean, *scale, *weights, bias)):
            raise CombinerError("weights: every mean, scale, weight and the bias must be a finite number")
        if not all(v > 0 for v in scale):
            raise CombinerError("weights: every scale must be > 0 (it divides the feature)")
        return cls(mean, scale, weights, bias, features)

    @cached_property
    def kinds(self) -> tuple[str, ...]:
        """The kind of evidence of each entry (``features.KINDS``), fixed by the weights: once."""
        return tuple(KINDS[name] for name in self.features)

    def score(self, vector: list[float]) -> Score:
        """Confidence for a vector built in ``self.features`` order (``features.feature_vector``). A NaN
        entry is "no opinion" (the text view without words or without its model): it counts as the
        training mean, so it pushes neither way."""
        # every kind, weighed or not: the commit's metadata names the same four (docs/protocol.md)
        contributions = dict.fromkeys(EVIDENCE_KINDS, 0.0)
        total = self.bias
        for value, mean, scale, weight, group in zip(vector, self.mean, self.scale, self.weights, self.kinds,
                                                      strict=True):
            part = 0.0 if math.isnan(value) else weight * (value - mean) / scale
            contributions[group] = contributions.get(group, 0.0) + part
            total += part
        return Score(1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, total)))), contributions,
                     tuple(dict.fromkeys(self.kinds)))


@lru_cache(maxsize=4)
def load_combiner(path: Path = WEIGHTS_FILE) -> Combiner:
    """The combiner in ``path``; ``CombinerError`` with the reason when it cannot be used."""
    try:
        return Combiner.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, CombinerError) as exc:
        raise CombinerError(f"{path}: not usable end-of-turn weights: {exc}") from None
