"""Word timings: their error on the tone model, and what a final pays for them, words on vs off.

1. Timing error: random tone sentences (Han tones, one word per burst) at random burst lengths,
   gaps and lead-ins, decoded by the onnxruntime engine with ``words``; each word's start and end
   against its burst's exact start and end.
2. Cost per final, measured side by side in one run (alternating off/on, medians):
   a. the whole engine call on the tone model (a 3 s sentence);
   b. the decode's CTC step on SenseVoice-shaped logits (25,055 tokens, 3 s = 54 frames, 12
      tokens), where the softmax per token is what words add: greedy alone vs greedy + token runs,
      posteriors and words. The encoder does not change with ``words``, so this is the whole
      difference on SenseVoice.

    python utils/performance/words_bench.py [--sentences 300] [--repeats 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.ctc import greedy  # noqa: E402
from kitt_stt.asr.engine import AsrRequest, DecodeOptions  # noqa: E402
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine, body_words  # noqa: E402
from kitt_stt.asr.sense_voice_model import load_sense_voice_model  # noqa: E402
from kitt_stt.asr.words import overall_confidence  # noqa: E402
from kitt_stt.config.schema import AsrConfig  # noqa: E402
from kitt_stt.models.tone_model import build_tone_model  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402

HAN_TONES = "打开关车门窗"
SENSEVOICE_VOCAB = 25055


def pcm(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)


def timing_errors(engine: OrtSenseVoiceEngine, sentences: int, rng: np.random.Generator) -> None:
    starts, ends, exact = [], [], 0
    for _ in range(sentences):
        length = int(rng.integers(3, 11))
        text = "".join(rng.choice(list(HAN_TONES), size=length))
        burst, gap, lead = float(rng.integers(80, 401)), float(rng.integers(60, 301)), float(rng.integers(0, 501))
        audio = synthesize(text, ToneStyle(burst_ms=burst, gap_ms=gap, lead_ms=lead, tail_ms=300))
        result = engine.decode_batch([AsrRequest(pcm(audio), DecodeOptions(words=True))])[0]
        if [word.text for word in result.words] != list(text):
            continue
        exact += 1
        for index, word in enumerate(result.words):
            truth = lead + index * (burst + gap)
            starts.append(word.start_ms - truth)
            ends.append(word.end_ms - (truth + burst))
    print(f"tone model, {exact}/{sentences} sentences decoded exactly, {len(starts)} words "
          "(burst 80-400 ms, gap 60-300 ms, lead 0-500 ms):")
    for name, errors in (("start", starts), ("end", ends)):
        absolute = np.abs(np.array(errors))
        print(f"  {name}: mean error {np.mean(errors):+.1f} ms, mean |error| {absolute.mean():.1f} ms, "
              f"p95 |error| {np.percentile(absolute, 95):.0f} ms, max |error| {absolute.max():.0f} ms "
              f"(one CTC frame: 60 ms)")


def side_by_side(off: Callable[[], object], on: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds of ``off`` and ``on``, alternated so both see the same machine load."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(repeats):
        for name, call in (("off", off), ("on", on)):
            started = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - started)
    return statistics.median(times["off"]), statistics.median(times["on"])


def report(label: str, off_s: float, on_s: float) -> None:
    print(f"  {label}: words off {off_s * 1e3:.3f} ms, on {on_s * 1e3:.3f} ms, "
          f"+{(on_s - off_s) * 1e3:.3f} ms per final (x{on_s / off_s:.2f})")


def sensevoice_shaped_logits(rng: np.random.Generator, frames: int = 54, tokens: int = 12) -> np.ndarray:
    logits = rng.normal(0.0, 1.0, (frames, SENSEVOICE_VOCAB)).astype(np.float32)
    logits[:, 0] += 8.0  # blank owns most frames
    for frame in range(4):  # the four prefix tags
        logits[frame, 24884 + frame] += 20.0
    for frame in rng.choice(np.arange(5, frames), size=tokens, replace=False):
        logits[frame, int(rng.integers(100, 20000))] += 15.0  # a spike
    return logits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(25)
    with tempfile.TemporaryDirectory() as tmp:
        build_tone_model(Path(tmp))
        engine = OrtSenseVoiceEngine(load_sense_voice_model(Path(tmp)), "tone", AsrConfig())
        timing_errors(engine, args.sentences, rng)
        print(f"cost per final, medians of {args.repeats} alternated runs:")
        audio = pcm(synthesize("打开车门窗关打开车门", ToneStyle(lead_ms=0, tail_ms=0)))  # 2.9 s
        requests = {words: [AsrRequest(audio, DecodeOptions(words=words))] for words in (False, True)}
        report("tone model, whole engine call (2.9 s)",
               *side_by_side(lambda: engine.decode_batch(requests[False]),
                             lambda: engine.decode_batch(requests[True]), args.repeats))
    logits = sensevoice_shaped_logits(rng)
    symbols = [f"t{index}" for index in range(SENSEVOICE_VOCAB)]
    length = logits.shape[0]

    def words_on() -> None:
        decoded = greedy(logits, length)
        overall_confidence(body_words(logits, length, decoded, [symbols[token] for token in decoded.token_ids]))

    report("SenseVoice-shaped CTC step (25,055 tokens, 54 frames, 12 tokens)",
           *side_by_side(lambda: greedy(logits, length), words_on, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
