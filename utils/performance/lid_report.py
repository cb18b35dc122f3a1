"""Language identification of whisper-base over every zh/en recording we have, before and after.

    python utils/performance/lid_report.py [--model whisper-base] [--languages zh,en]

Recordings: ``utils/performance/lid_corpus.py`` (fixtures, pocketsphinx-testdata, alsa-utils,
gcin-voice phrases, espeak-ng; ``apt-get install pocketsphinx-testdata alsa-utils gcin-voice
espeak-ng sox``). Before: sherpa-onnx with language "" (Whisper detects among all its
languages, what ``asr.language: auto`` did). After: the restricted language step
(``asr/whisper_language.py``); its window, silence padding and zh bias are chosen on the
``tune`` split (espeak-ng and half the gcin phrases) and reported on the ``held_out`` split.
Cost: the language step's time over the time of decoding the same recording (sherpa-onnx,
"auto"), both measured one right after the other on the same thread (median and mean over
recordings).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.language import restricted_guess
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.models.registry import resolve_model
from utils.performance.lid_corpus import Recording, load_corpus

WINDOWS_MS = (1000, 1500)  # the server decides when a segment has 1 s, reading up to the window
PADS = (0, 100, 300, 700)  # 700: the silence sherpa-onnx itself decodes with (asr.whisper.tail_paddings)
BIASES = tuple(round(0.25 * step, 2) for step in range(-12, 25))  # -3 .. +6 on the zh score


@dataclass
class Setting:
    window_ms: int
    pad_frames: int
    logits: list[np.ndarray]  # per recording, the language step's raw logits
    cost_s: list[float]


def _accuracy(picks: Sequence[str], recordings: Sequence[Recording], keep: Sequence[bool]) -> float:
    chosen = [pick == rec.lang for pick, rec, k in zip(picks, recordings, keep, strict=True) if k]
    return sum(chosen) / max(len(chosen), 1)


def _picks(setting: Setting, tokens: dict[str, int], languages: Sequence[str], bias: float) -> list[str]:
    picks = []
    for logits in setting.logits:
        shifted = logits.copy()
        shifted[tokens["zh"]] += bias
        picks.append(restricted_guess(shifted, tokens, languages).lang)
    return picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--languages", default="zh,en")
    args = parser.parse_args()
    languages = args.languages.split(",")
    missing: list[str] = []
    recordings = load_corpus(missing)
    for source in missing:
        print(f"skipped (not installed): {source}")
    model = load_whisper_model(resolve_model(args.model).directory)
    engine = SherpaWhisperEngine(model, "whisper")

    detectors = [(window_ms, pad, WhisperLanguageDetector(model, window_frames=window_ms // 10, pad_frames=pad))
                 for window_ms in WINDOWS_MS for pad in PADS]
    settings = [Setting(window_ms, pad, [], []) for window_ms, pad, _ in detectors]
    before, decode_s = [], []
    for rec in recordings:  # side by side per recording, so a busy machine slows both alike
        start = time.perf_counter()  # what asr.language: auto did: Whisper alone, among all its languages
        before.append(engine.decode_batch([AsrRequest(rec.samples, DecodeOptions(language="auto"))])[0].lang)
        decode_s.append(time.perf_counter() - start)
        for setting, (_, _, detector) in zip(settings, detectors, strict=True):
            start = time.perf_counter()
            setting.logits.append(detector.language_logits(rec.samples))
            setting.cost_s.append(time.perf_counter() - start)
    detector = detectors[0][2]
    tokens = detector.language_tokens
    tune = [rec.split == "tune" for rec in recordings]
    held = [not t for t in tune]
    everything = [True] * len(recordings)
    print("\ntuning (accuracy on the tune split; best bias per setting):")
    best = None
    for setting in settings:
        scored = max((_accuracy(_picks(setting, tokens, languages, b), recordings, tune), -abs(b), b) for b in BIASES)
        cost = statistics.median(c / d for c, d in zip(setting.cost_s, decode_s, strict=True))
        held_out = _accuracy(_picks(setting, tokens, languages, scored[2]), recordings, held)
        print(f"  window {setting.window_ms:>5} ms, pad {setting.pad_frames:>3}: zh bias {scored[2]:+.2f} "
              f"tune {scored[0]:.3f}, held-out {held_out:.3f}  (cost {cost:.1%} of a decode, median)")
        key = (round(scored[0], 3), -cost)  # the most accurate on the tune split; of equals, the cheapest
        if best is None or key > best[0]:
            best = (key, setting, scored[2])
    assert best is not None
    _, chosen, bias = best
    picks = _picks(chosen, tokens, languages, bias)
    unbiased = _picks(chosen, tokens, languages, 0.0)
    print(f"\nchosen: window {chosen.window_ms} ms, pad {chosen.pad_frames}, zh bias {bias:+.2f}")

    ratios = [c / d for c, d in zip(chosen.cost_s, decode_s, strict=True)]
    print(f"\n| recordings | n | before (auto, all languages) | after, no bias | after ({'+'.join(languages)}) |")
    print("|---|---:|---:|---:|---:|")
    groups = [("fixtures (human)", [r.source == "fixtures" for r in recordings])]
    groups += [(source, [r.source == source for r in recordings])
               for source in dict.fromkeys(r.source for r in recordings) if source != "fixtures"]
    groups += [("held-out split", held), ("tune split", tune), ("all", everything)]
    for name, keep in groups:
        print(f"| {name} | {sum(keep)} | {_accuracy(before, recordings, keep):.1%} | "
              f"{_accuracy(unbiased, recordings, keep):.1%} | {_accuracy(picks, recordings, keep):.1%} |")
    print(f"\nadded cost per segment (language step / the same recording's decode): median "
          f"{statistics.median(ratios):.1%}, mean {statistics.mean(ratios):.1%}; language step "
          f"{statistics.median(chosen.cost_s) * 1000:.0f} ms median, decode "
          f"{statistics.median(decode_s) * 1000:.0f} ms median")
    wrong = [f"{rec.source}:{rec.name} ({rec.lang}->{pick})" for rec, pick in zip(recordings, picks, strict=True)
             if pick != rec.lang]
    print("wrong after:", ", ".join(wrong) or "none")


if __name__ == "__main__":
    main()
