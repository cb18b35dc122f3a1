"""eot-bench-style comparison of end-of-turn decisions on held-out speakers, side by side in one run.

Each clip of the labelled set (``utils/turns``: complete turns and turns cut at word boundaries)
is followed by silence; each method says when it would commit. A cut turn committed before
``PAUSE_MS`` (the thinking pause after which its speaker would go on) cuts the user off. The
fused decision's confidences are leave-one-speaker-out: each clip is scored by weights fitted
without its speaker. Methods:

* ``vad-timer``: commit after ``turn.wait_ms`` of silence, whatever was said;
* ``smart-turn``: TurnSense's p at the pause, commit at once when p >= threshold, else the timer;
* ``smart-turn+rules``: the same, and words ending mid-phrase wait ``turn.unfinished_wait_ms``
  (the shipped 0.3.0 policy);
* ``fused, no text view (0.5.0's features, by speaker)``: 0.4.0/0.5.0's five features
  (``train.WITHOUT_TEXT``: p, silence, the two word rules, the final pitch) refitted
  leave-one-speaker-out on the clips, as 0.5.0 shipped them;
* ``fused + p + silence (by speaker)``: the text view with the audio model's p and the silence,
  fitted on the clips leave-one-speaker-out (the issue's fusion), second looks included;
* ``fused (shipped)``: the shipped weights (``features.FEATURES``: the text view and its Chinese
  offset), fitted on the phrase table (``text_dev.py``), so every clip is held out;
* ``fused, text view absent``: the shipped weights with no text view (``turn.text_model: null``,
  or a text without words): nothing to be confident about, so every turn waits ``turn.wait_ms``.

The text view's scores come from the table (``extract.py`` caches them), so the rows need no
model installed; the cost lines read it from ``--models`` when it is there.

Each group's complete turns are set against its cut turns of one kind at a time (``cut``: ``pause``
at an inner pause, ``word`` mid-sentence at an aligned word boundary; ``utils/turns/corpus.py``).

Columns: cut-off share at 300 / 600 ms budgets (cut turns committed within that much silence),
the share of cut turns committed inside the pause, the complete turns committed within 300 / 600
ms, complete-turn commit p50 / p95 at the shipped settings, and the complete p50 at the best
setting of the method's knob (timer wait or threshold) that keeps cut-offs in the pause <= 5 %.
A commit at the first look costs ``vad.silence_ms`` (the decision starts when the segment ends);
a second look at S ms commits at S plus ``MODEL_MS``. Then the fused decision's own cost per turn
(prosody, words, combiner; the model runs are TurnSense's and are timed apart), and the text
view's cost per final, one thread: each transcript scored as a turn of two finals (its first
half, then the whole), so the second costs only its new tokens, as on a server.

    PYTHONPATH=. python utils/performance/eot_fused_report.py [--models <model cache>]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.config.schema import AppConfig  # noqa: E402
from kitt_stt.pipeline.turn_text import TextEnding, text_ending  # noqa: E402
from kitt_stt.turn.combiner import load_combiner  # noqa: E402
from kitt_stt.turn.features import feature_vector  # noqa: E402
from kitt_stt.turn.prosody import prosody  # noqa: E402
from kitt_stt.turn.text_model import TextModelError, TurnTextModel  # noqa: E402
from kitt_stt.turn.words import word_evidence  # noqa: E402
from utils.performance.memory_probe import read_sample  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.turns.extract import TABLE  # noqa: E402
from utils.turns.scores import clip_key  # noqa: E402
from utils.turns.train import WITHOUT_TEXT, leave_one_speaker_out, shipped_scores  # noqa: E402

PAUSE_MS = 1500
MODEL_MS = 50  # a second look waits for one TurnSense run (44-55 ms here)
GROUPS: dict[str, Callable[[dict], bool]] = {
    "human en": lambda c: not c["synthetic"] and c["lang"] == "en",
    "human zh (joined syllables)": lambda c: not c["synthetic"] and c["lang"] == "zh",
    "synthetic en": lambda c: c["synthetic"] and c["lang"] == "en",
    "synthetic zh": lambda c: c["synthetic"] and c["lang"] == "zh",
}
CUT_KINDS = ("pause", "word")
Method = Callable[[dict, float], float]  # (clip, knob) -> commit delay in ms
Scores = dict[str, dict[str, float]]  # held-out confidence per clip key and look


@cache
def _unfinished(text: str) -> bool:
    """The words end mid-phrase (the hold rule's test), once per text: the sweeps ask it thousands of times."""
    return text_ending(text) is TextEnding.UNFINISHED


def methods(oofs: dict[str, Scores], config: AppConfig) -> dict[str, tuple[Method, float, list[float]]]:
    """name -> (delay function, shipped knob, knob sweep)."""
    turn, first = config.turn, config.vad.silence_ms
    thresholds = [round(t, 3) for t in np.linspace(0.0, 1.0, 201)] + [1.01]

    def timer(clip: dict, wait: float) -> float:
        return wait

    def smart_turn(clip: dict, threshold: float) -> float:
        return first if clip["p"]["100"] >= threshold else turn.wait_ms

    def with_rules(clip: dict, threshold: float) -> float:
        if _unfinished(clip["text"]):
            return turn.unfinished_wait_ms
        return smart_turn(clip, threshold)

    def fused(oof: Scores) -> Method:
        def delay(clip: dict, threshold: float) -> float:
            if _unfinished(clip["text"]):
                return turn.unfinished_wait_ms
            scores = oof[clip_key(clip)]
            if scores["100"] >= threshold:
                return first
            for look in turn.fused_looks_ms:
                if scores[str(look)] >= threshold:
                    return look + MODEL_MS
            return turn.wait_ms
        return delay

    return {"vad-timer": (timer, turn.wait_ms, list(range(100, 3001, 50))),
            "smart-turn": (smart_turn, turn.threshold, thresholds),
            "smart-turn+rules": (with_rules, turn.threshold, thresholds),
            **{name: (fused(oof), turn.fused_threshold, thresholds) for name, oof in oofs.items()}}


def _row(clips: list[dict], method: Method, knob: float, sweep: list[float]) -> list[str]:
    complete = [method(c, knob) for c in clips if c["complete"]]
    cut = [method(c, knob) for c in clips if not c["complete"]]

    def share(values: list[float], limit: float, strict: bool = False) -> str:
        hits = sum(1 for v in values if (v < limit if strict else v <= limit))
        return f"{100.0 * hits / len(values):.0f} %" if values else "-"

    best = None
    for setting in sweep:
        cuts = [method(c, setting) for c in clips if not c["complete"]]
        if cuts and sum(1 for v in cuts if v < PAUSE_MS) / len(cuts) <= 0.05:
            p50 = nearest_rank([method(c, setting) for c in clips if c["complete"]], 50)
            if p50 is not None and (best is None or p50 < best):
                best = p50
    return [share(cut, 300), share(cut, 600), share(cut, PAUSE_MS, strict=True), share(complete, 300),
            share(complete, 600), f"{nearest_rank(complete, 50):.0f} / {nearest_rank(complete, 95):.0f}",
            "-" if best is None else f"{best:.0f}"]


def report(clips: list[dict], oofs: dict[str, Scores], config: AppConfig) -> str:
    lines = ["| clips | method | cut off at 300 ms | at 600 ms | cut in the 1.5 s pause | complete by 300 ms | "
             "by 600 ms | complete p50 / p95 ms | p50 for <= 5 % cut-offs |", "|---|---|---|---|---|---|---|---|---|"]
    for group, member in GROUPS.items():
        for kind in CUT_KINDS:
            chosen = [c for c in clips if member(c) and (c["complete"] or c.get("cut") == kind)]
            cuts = sum(not c["complete"] for c in chosen)
            if not cuts:
                continue
            label = f"{group}: {sum(c['complete'] for c in chosen)} complete, {cuts} cut at a {kind}"
            for name, (method, knob, sweep) in methods(oofs, config).items():
                lines.append(f"| {label} | {name} | " + " | ".join(_row(chosen, method, knob, sweep)) + " |")
    return "\n".join(lines)


def decision_cost(clips: list[dict], repeats: int = 50) -> tuple[float, float]:
    """(median, max) ms per turn of the fused decision's own work on 3 s of audio, the text view
    aside (timed by ``text_view_cost``): prosody, words, combiner. Median and max of ``repeats``
    calls: the machine is shared, so one slow call says more about the neighbours than about the code."""
    rng = np.random.default_rng(0)
    t = np.arange(48000) / 16000.0
    audio = (6000 * np.sin(2 * np.pi * np.cumsum(180 - 20 * t) / 16000) + rng.normal(0, 300, t.size)).astype(np.int16)
    audio = np.concatenate([audio, np.zeros(1600, dtype=np.int16)])
    combiner = load_combiner()
    texts = [c["text"] for c in clips]
    costs = []
    for index in range(repeats):
        started = time.perf_counter()
        words = word_evidence(texts[index % len(texts)], lambda _text: -10.0)
        combiner.score(feature_vector(0.7, 100, words, prosody(audio), combiner.features))
        costs.append((time.perf_counter() - started) * 1000.0)
    return float(np.median(costs)), max(costs)


def text_view_cost(model_dir: Path, clips: list[dict]) -> str:
    """The text view's load (time, resident memory) and its cost per final, one thread."""
    rss_before = read_sample(os.getpid(), "before the text model").rss_kb
    started = time.perf_counter()
    try:
        model = TurnTextModel(model_dir)
    except TextModelError as exc:
        return f"text view: not measured ({exc})"
    load_ms = (time.perf_counter() - started) * 1000.0
    firsts, seconds, tokens = [], [], []
    for clip in clips:
        words = clip["text"].split()
        for part in (" ".join(words[: max(1, len(words) // 2)]), clip["text"]):
            answer = model.end_of_turn(part)
            if answer is not None and answer.new_tokens:
                (firsts if part != clip["text"] else seconds).append(answer.ms)
                tokens.append(answer.new_tokens)
    rss_after = read_sample(os.getpid(), "after the text model").rss_kb
    grown = ("" if rss_before is None or rss_after is None
             else f", {(rss_after - rss_before) / 1024:.0f} MB more resident")
    every = firsts + seconds
    return (f"text view (one thread): read in {load_ms:.0f} ms{grown}; per final median {np.median(every):.1f} ms, "
            f"p95 {nearest_rank(every, 95):.1f} ms, max {max(every):.1f} ms ({len(every)} finals, median "
            f"{np.median(tokens):.0f} new tokens, max {max(tokens)}); a turn's second final "
            f"(its earlier words cached) median {np.median(seconds):.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, help="model cache holding smollm2-turn/, for the text view's cost")
    args = parser.parse_args()
    table = json.loads(TABLE.read_text())
    clips = table["clips"]
    config = AppConfig()
    features = load_combiner().features
    combiner = load_combiner()
    oofs = {"fused, no text view (0.5.0's features, by speaker)": leave_one_speaker_out(clips, WITHOUT_TEXT),
            "fused + p + silence (by speaker)": leave_one_speaker_out(clips, ("model_logit", "silence_s", *features)),
            "fused (shipped)": shipped_scores(clips, combiner),
            "fused, text view absent": shipped_scores(clips, combiner, text_absent=True)}
    print(f"{len(clips)} clips, {len({c['speaker'] for c in clips})} speakers; fused scores leave-one-speaker-out; "
          f"shipped settings: turn.threshold {config.turn.threshold}, fused_threshold {config.turn.fused_threshold}, "
          f"looks {list(config.turn.fused_looks_ms)} ms, wait {config.turn.wait_ms} ms\n")
    print(report(clips, oofs, config))
    median, worst = decision_cost(clips)
    print(f"\nfused decision cost without the text view (prosody + words + combiner, one thread): median "
          f"{median:.2f} ms, max {worst:.2f} ms per turn (50 turns of 3 s)")
    if args.models is not None:
        print(text_view_cost(args.models / "smollm2-turn", clips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
