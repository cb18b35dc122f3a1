"""How the turn studies name clips and score a separation, shared by training, the report and the
recognizer-view studies so that their numbers are computed one way."""

from __future__ import annotations


def clip_key(clip: dict) -> str:
    """A clip's name in held-out score tables: names repeat across speakers."""
    return f"{clip['speaker']}/{clip['name']}"


def auc(scores: list[float], labels: list[bool]) -> float:
    """Probability that a random complete turn scores above a random cut one (ties count half);
    NaN when either kind is missing."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y]
    negatives = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))
