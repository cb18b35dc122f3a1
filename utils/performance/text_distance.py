"""How far a transcript is from another: Levenshtein distance over characters or words."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(first: Sequence[str], second: Sequence[str]) -> int:
    """Insertions, deletions and substitutions turning ``first`` into ``second`` (strings or word lists)."""
    row = list(range(len(second) + 1))
    for i, item in enumerate(first, 1):
        diagonal, row[0] = row[0], i
        for j, other in enumerate(second, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (item != other))
    return row[-1]


def words(text: str) -> list[str]:
    """Lower-cased words without punctuation."""
    return "".join(char.lower() if char.isalnum() else " " for char in text).split()
