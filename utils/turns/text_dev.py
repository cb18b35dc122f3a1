"""Choose the fused decision's commit threshold on text the audio corpus never saw.

The development set is the project's own phrase table (``tests/fixtures/text/itn_phrases.tsv``:
in-car sentences and number phrases, English and Mandarin, written by hand for issue 33), each
phrase as a complete turn and cut half way (at a word for English, a character for Mandarin):
nothing here is a clip of ``features.json``, so the audio corpus stays a test set. The text view
scores each (``turn/text_model.py``), the shipped combiner turns that into a confidence as at the
first look (the audio model's p and the silence at their training means: on the shipped weights
their weight is near zero), and the table shows per threshold the complete turns that would commit
at once against the cut ones that would be cut off. The shipped ``turn.fused_threshold`` is the
lowest threshold that keeps the cut share at or under ``CUT_BUDGET`` in both languages.

    PYTHONPATH=. python -m utils.turns.text_dev --models <model cache>    # ~15 s
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

from kitt_stt.turn.combiner import load_combiner
from kitt_stt.turn.text_model import TurnTextModel
from kitt_stt.turn.words import WordEvidence
from utils.turns.scores import auc

PHRASES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "text" / "itn_phrases.tsv"
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


def confidence(model: TurnTextModel, text: str) -> float:
    """The shipped combiner's confidence at the first look with only the words known."""
    combiner = load_combiner()
    answer = model.end_of_turn(text)
    words = WordEvidence(False, False, None if answer is None else answer.log_odds, bool(re.search(r"[一-鿿]", text)))
    values = {"text_end": math.nan if words.text_end is None else words.text_end,
              "han_text": math.nan if words.text_end is None else float(words.han)}
    vector = [values.get(name, mean) for name, mean in zip(combiner.features, combiner.mean, strict=True)]
    return combiner.score(vector).confidence


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, required=True, help="model cache holding smollm2-turn/")
    args = parser.parse_args()
    model = TurnTextModel(args.models / "smollm2-turn")
    scored: dict[str, list[tuple[float, float]]] = {"en": [], "zh": []}
    for lang, complete, cut in pairs():
        scored[lang].append((confidence(model, complete), confidence(model, cut)))
    print("| lang | pairs | AUC | " + " | ".join(f"{t:.2f}: complete / cut" for t in THRESHOLDS) + " |")
    print("|---|---|---|" + "---|" * len(THRESHOLDS))
    chosen = []
    for lang, rows in scored.items():
        complete, cut = [a for a, _ in rows], [b for _, b in rows]
        cells = []
        for threshold in THRESHOLDS:
            committed = sum(a >= threshold for a in complete) / len(complete)
            cut_off = sum(b >= threshold for b in cut) / len(cut)
            cells.append(f"{committed:.0%} / {cut_off:.0%}")
        chosen.append(min(t for t in THRESHOLDS if sum(b >= t for b in cut) / len(cut) <= CUT_BUDGET))
        separation = auc(complete + cut, [True] * len(complete) + [False] * len(cut))
        print(f"| {lang} | {len(rows)} | {separation:.2f} | " + " | ".join(cells) + " |")
    print(f"\nlowest threshold with <= {CUT_BUDGET:.0%} of cut phrases committed in both languages: {max(chosen):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
