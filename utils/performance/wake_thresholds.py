"""Choose the wake-phrase match thresholds from data: false wakes against missed wakes.

Reads the wake fixtures (``tests/fixtures/text/wake_cases.tsv``: what recognisers write for the
configured phrases said before a command, and in-car text that is not addressed to the
assistant), runs the matcher at each threshold and prints, per script, how many non-wake texts
woke it (false wakes), how many wake texts did not (missed), and how many woke it but left the
wrong text after the phrase (wrong strip).  The defaults in ``kitt_stt/text/wake.py`` are read
from these tables (``docs/text.md``)::

    python utils/performance/wake_thresholds.py
    python utils/performance/wake_thresholds.py --scores 0.7 0.75 0.8 --show 0.75
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.text.tokens import is_han  # noqa: E402
from kitt_stt.text.wake import (  # noqa: E402
    DEFAULT_MIN_SCORE_HAN,
    DEFAULT_MIN_SCORE_HAN_SHORT,
    DEFAULT_MIN_SCORE_LATIN,
    PinyinWakeDetector,
    WakeMatchParams,
    WakeMode,
    WakeSettings,
)

CASES = REPO / "tests/fixtures/text/wake_cases.tsv"
PHRASES = ("你好小凯", "小凯", "hey kitt")
SCORES = tuple(round(0.5 + 0.05 * step, 2) for step in range(11))


@dataclass(frozen=True)
class WakeCase:
    wake: bool  # must wake (a misheard or exact wake phrase) or must not
    text: str
    rest: str  # what must be left after the wake phrase
    note: str

    @property
    def han(self) -> bool:
        return any(is_han(char) for char in self.text)


def load_cases(path: Path = CASES) -> list[WakeCase]:
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, text, rest, note = line.split("\t")
        if kind not in ("wake", "other"):
            raise ValueError(f"{path}: unknown kind {kind!r} in {line!r}")
        cases.append(WakeCase(kind == "wake", text, rest, note))
    return cases


@dataclass(frozen=True)
class Outcome:
    false_wakes: list[WakeCase]
    missed: list[WakeCase]
    wrong_strip: list[WakeCase]


def evaluate(cases: list[WakeCase], phrases: tuple[str, ...], params: WakeMatchParams) -> Outcome:
    detector = PinyinWakeDetector(WakeSettings(phrases=phrases, mode=WakeMode.DETECT, match=params))
    false_wakes, missed, wrong_strip = [], [], []
    for case in cases:
        match = detector.detect(case.text)
        if not case.wake and match is not None:
            false_wakes.append(case)
        elif case.wake and match is None:
            missed.append(case)
        elif case.wake and match is not None and match.rest != case.rest:
            wrong_strip.append(case)
    return Outcome(false_wakes, missed, wrong_strip)


#: each threshold, with the default it is shown against and whether it is for Chinese fixtures
THRESHOLDS = {
    "min_score_han": (DEFAULT_MIN_SCORE_HAN, True),
    "min_score_han_short": (DEFAULT_MIN_SCORE_HAN_SHORT, True),
    "min_score_latin": (DEFAULT_MIN_SCORE_LATIN, False),
}


def sweep(cases: list[WakeCase], phrases: tuple[str, ...], scores: tuple[float, ...], name: str) -> list[str]:
    """Table rows for one threshold, the others at their defaults, over the Chinese or the Latin
    fixtures (whichever it is for)."""
    default, han = THRESHOLDS[name]
    subset = [case for case in cases if case.han == han]
    wakes, others = sum(case.wake for case in subset), sum(not case.wake for case in subset)
    rows = [f"| {name} | false wakes (of {others}) | missed (of {wakes}) | wrong strip |", "|---|---|---|---|"]
    for score in scores:
        params = WakeMatchParams(**{name: score})
        outcome = evaluate(subset, phrases, params)
        mark = " (default)" if score == default else ""
        rows.append(f"| {score:.2f}{mark} | {len(outcome.false_wakes)} | {len(outcome.missed)} "
                    f"| {len(outcome.wrong_strip)} |")
    return rows


def listing(cases: list[WakeCase], phrases: tuple[str, ...], params: WakeMatchParams) -> list[str]:
    """Which fixtures fail with ``params``, and how."""
    outcome = evaluate(cases, phrases, params)
    lines = []
    for label, failed in (("false wake", outcome.false_wakes), ("missed", outcome.missed),
                          ("wrong strip", outcome.wrong_strip)):
        lines += [f"- {label}: `{case.text}` ({case.note})" for case in failed]
    return lines or ["- none"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--phrases", nargs="+", default=list(PHRASES))
    parser.add_argument("--scores", nargs="+", type=float, default=list(SCORES))
    args = parser.parse_args(argv)
    cases, phrases, scores = load_cases(args.cases), tuple(args.phrases), tuple(args.scores)
    print(f"phrases: {' | '.join(phrases)}; {len(cases)} fixtures from {args.cases.name}\n")
    for name in THRESHOLDS:
        print("\n".join(sweep(cases, phrases, scores, name)) + "\n")
    print("failures at the defaults:")
    print("\n".join(listing(cases, phrases, WakeMatchParams())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
