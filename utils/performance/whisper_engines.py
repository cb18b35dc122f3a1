"""Whisper on our onnxruntime engine against sherpa-onnx, side by side in one run (docs/models.md).

    PYTHONPATH=. python utils/performance/whisper_engines.py [--model whisper-base] [--repeats 5]

Text: every recording of the language corpus (``utils/performance/lid_corpus.py``: the fixtures,
pocketsphinx-testdata, alsa-utils, gcin-voice, espeak-ng; missing sources are said and skipped)
decoded whole by both engines, once in its own language and once with ``auto`` within zh and en
(each engine with its own language step); the share of identical texts, the character error rate
of ours against sherpa-onnx's, and each engine's language accuracy. Speed: one final's ASR time
(``decode_batch`` of the whole utterance with ``auto`` within zh and en: language step and decode)
for a 3 s and a 15 s utterance, the median of ``--repeats``. Memory: a fresh process per engine
builds it as ``config.yaml`` does, decodes a Mandarin and an English recording with ``auto``
within zh and en, and reports its RSS (``VmRSS``; ``VmHWM`` the peak). Ratios are ours / sherpa's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kitt_stt.asr.engine import AsrEngine, AsrRequest, DecodeOptions
from kitt_stt.asr.factory import build_engine
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig
from utils.performance.lid_corpus import FIXTURES, Recording, load_corpus
from utils.performance.text_distance import edit_distance

ENGINES = ("ort", "sherpa")
AUTO = DecodeOptions(language="auto", languages=("zh", "en"))


def engine(model: str, name: str, padding: str = "whisper") -> AsrEngine:
    """``name``'s engine for ``model``; ``padding``: ours' asr.whisper.padding (sherpa-onnx always pads with zeros)."""
    whisper = {"padding": padding} if name == "ort" else {}
    return build_engine(AppConfig.model_validate({"asr": {"model": model, "engine": name, "whisper": whisper}}))


def decode(asr: AsrEngine, samples: np.ndarray, options: DecodeOptions) -> tuple[str, str | None]:
    [result] = asr.decode_batch([AsrRequest(samples, options)])
    return result.text, result.lang


def text_report(engines: dict[str, AsrEngine], corpus: list[Recording]) -> None:
    for label in ("own language", "auto within zh, en"):
        same = errors = length = 0
        right = dict.fromkeys(ENGINES, 0)
        for rec in corpus:
            options = AUTO if label.startswith("auto") else DecodeOptions(language=rec.lang)
            ours, theirs = (decode(engines[name], rec.samples, options) for name in ENGINES)
            same += ours[0] == theirs[0]
            errors += edit_distance(ours[0], theirs[0])
            length += max(len(theirs[0]), 1)
            for name, (_, lang) in zip(ENGINES, (ours, theirs), strict=True):
                right[name] += lang == rec.lang
            if ours[0] != theirs[0]:
                print(f"  differs ({label}): {rec.source}/{rec.name}: ours {ours[0]!r} ({ours[1]}), "
                      f"sherpa {theirs[0]!r} ({theirs[1]})")
        count = len(corpus)
        print(f"{label}: identical {same}/{count} ({100 * same / count:.1f} %), CER ours vs sherpa "
              f"{100 * errors / length:.2f} %, language right: ours {right['ort']}/{count}, "
              f"sherpa {right['sherpa']}/{count}")


def utterance(seconds: float) -> np.ndarray:
    """English fixtures and pocketsphinx speech end to end, cut to ``seconds``."""
    clips = [rec.samples for rec in load_corpus([]) if rec.lang == "en"]
    joined = np.concatenate(clips)
    return joined[: int(seconds * 16000)]


def speed_report(engines: dict[str, AsrEngine], repeats: int) -> None:
    for seconds in (3.0, 15.0):
        samples = utterance(seconds)
        medians = {}
        for name in ENGINES:
            decode(engines[name], samples, AUTO)  # warm: the first call builds recognizers
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                decode(engines[name], samples, AUTO)
                times.append(time.perf_counter() - start)
            medians[name] = statistics.median(times)
        print(f"per-final ASR time, {seconds:.0f} s utterance (auto within zh, en; median of {repeats}): ours "
              f"{1000 * medians['ort']:.0f} ms, sherpa {1000 * medians['sherpa']:.0f} ms, ratio "
              f"{medians['ort'] / medians['sherpa']:.2f}")


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def rss_child(model: str, name: str, padding: str) -> None:
    """In a fresh process: the engine as config.yaml builds it, a zh and an en decode in auto."""
    asr = engine(model, name, padding)
    for clip in ("zh_da_kai_che_men", "en_go_forward_ten_meters"):
        decode(asr, read_wav_16k_mono(FIXTURES / f"{clip}.wav"), AUTO)
    print(json.dumps({"rss_mb": _status_kb("VmRSS") / 1024, "peak_mb": _status_kb("VmHWM") / 1024}))


def memory_report(model: str, padding: str) -> None:
    found = {}
    for name in ENGINES:
        out = subprocess.run([sys.executable, __file__, "--model", model, "--rss-child", name, "--padding", padding],
                             check=True,
                             capture_output=True, text=True).stdout
        found[name] = json.loads(out.strip().splitlines()[-1])
    ours, theirs = found['ort'], found["sherpa"]
    print(f"process RSS after auto decodes in zh and en: ours {ours['rss_mb']:.0f} MB (peak {ours['peak_mb']:.0f}), "
          f"sherpa {theirs['rss_mb']:.0f} MB (peak {theirs['peak_mb']:.0f}), ratio "
          f"{ours['rss_mb'] / theirs['rss_mb']:.2f}, {theirs['rss_mb'] - ours['rss_mb']:.0f} MB smaller")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--padding", choices=("whisper", "zeros"), default="whisper",
                        help="ours' asr.whisper.padding (zeros: sherpa-onnx's fill, to check the reproduction)")
    parser.add_argument("--rss-child", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.model, args.rss_child, args.padding)
        return
    missing: list[str] = []
    corpus = load_corpus(missing)
    for source in missing:
        print(f"skipped (not installed): {source}")
    print(f"{len(corpus)} recordings; ours pads with {args.padding}")
    engines = {name: engine(args.model, name, args.padding) for name in ENGINES}
    text_report(engines, corpus)
    speed_report(engines, args.repeats)
    del engines
    memory_report(args.model, args.padding)


if __name__ == "__main__":
    main()
