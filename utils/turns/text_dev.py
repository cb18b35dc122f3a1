"""The text view's development set: the shipped weights are fitted and the commit threshold is
chosen here, on text the audio corpus never saw, so ``features.json``'s clips stay a test set.

The set is the project's own phrase table (``tests/fixtures/text/itn_phrases.tsv``: in-car sentences
and number phrases, English and Mandarin, written by hand for issue 33), each phrase as a complete
turn and cut half way (at a word for English, a character for Mandarin). ``--score`` runs the text
view on each (``turn/text_model.py``) and caches the log-odds in ``data/text_dev.json``, so
``train.py`` fits the shipped weights from that file with no model installed. Then the table: per
threshold, the complete turns that would commit at the pause against the cut ones that would be cut
off, each language apart; the shipped ``turn.fused_threshold`` is the lowest threshold that keeps
the cut share at or under ``CUT_BUDGET`` in both languages.

    PYTHONPATH=. python -m utils.turns.text_dev --score --models <model cache>   # ~10 s: rescore
    PYTHONPATH=. python -m utils.turns.train                                     # refit the weights
    PYTHONPATH=. python -m utils.turns.text_dev                                  # the threshold table
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from kitt_stt.turn.combiner import load_combiner
from kitt_stt.turn.features import feature_vector
from kitt_stt.turn.prosody import NEUTRAL
from kitt_stt.turn.text_model import TurnTextModel
from kitt_stt.turn.words import word_evidence
from utils.turns.scores import auc

PHRASES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "text" / "itn_phrases.tsv"
TABLE = Path(__file__).resolve().parent / "data" / "text_dev.json"
CUT_BUDGET = 0.10  # the issue's: at most 10 % of cut turns committed inside the pause
THRESHOLDS = [round(0.40 + 0.05 * step, 2) for step in range(11)]
_PUNCTUATION = re.compile(r"[，。！？、,.!?]")


def pairs(path: Path = PHRASES) -> list[tuple[str, str, str]]:
    """(lang, complete, cut half way) per phrase of three words (English) or four characters (Mandarin) or more."""
    out = []
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 3:
            continue
        lang, text = fields[0], fields[2]
        if lang == "en":
            words = text.split()
            if len(words) >= 3:
                out.append((lang, text, " ".join(words[: round(len(words) / 2)])))
        else:
            bare = _PUNCTUATION.sub("", text)
            if len(bare) >= 4:
                out.append((lang, text, bare[: round(len(bare) / 2)]))
    return out


def score(model: TurnTextModel) -> list[dict]:
    """Every pair's complete and cut text with the text view's log-odds, in the table's order."""
    rows = []
    for lang, complete, cut in pairs():
        for text, is_complete in ((complete, True), (cut, False)):
            answer = model.end_of_turn(text)
            rows.append({"lang": lang, "text": text, "complete": is_complete,
                         "text_end": None if answer is None else round(answer.log_odds, 4)})
    return rows


def confidence(row: dict) -> float:
    """The shipped combiner's confidence for a scored row, as the policy computes it at the pause."""
    combiner = load_combiner()
    words = word_evidence(row["text"], lambda _text: row["text_end"])
    return combiner.score(feature_vector(None, 100, words, NEUTRAL, combiner.features)).confidence


def threshold_table(rows: list[dict]) -> list[str]:
    lines = ["| lang | pairs | AUC | " + " | ".join(f"{t:.2f}: complete / cut" for t in THRESHOLDS) + " |",
             "|---|---|---|" + "---|" * len(THRESHOLDS)]
    chosen = []
    for lang in ("en", "zh"):
        complete = [confidence(r) for r in rows if r["lang"] == lang and r["complete"]]
        cut = [confidence(r) for r in rows if r["lang"] == lang and not r["complete"]]
        cells = [f"{sum(a >= t for a in complete) / len(complete):.0%} / {sum(b >= t for b in cut) / len(cut):.0%}"
                 for t in THRESHOLDS]
        chosen.append(min(t for t in THRESHOLDS if sum(b >= t for b in cut) / len(cut) <= CUT_BUDGET))
        separation = auc(complete + cut, [True] * len(complete) + [False] * len(cut))
        lines.append(f"| {lang} | {len(complete)} | {separation:.2f} | " + " | ".join(cells) + " |")
    lines.append(f"\nlowest threshold with <= {CUT_BUDGET:.0%} of cut phrases committed in both languages: "
                 f"{max(chosen):.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--score", action="store_true", help="rescore the pairs with the text view first")
    parser.add_argument("--models", type=Path, help="model cache holding smollm2-turn/ (with --score)")
    args = parser.parse_args()
    if args.score:
        if args.models is None:
            parser.error("--score needs --models")
        TABLE.write_text(json.dumps(score(TurnTextModel(args.models / "smollm2-turn")), indent=0,
                                    ensure_ascii=False) + "\n")
    print("\n".join(threshold_table(json.loads(TABLE.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
