"""SenseVoice engine benchmark: our onnxruntime engine vs sherpa-onnx on the same model, one run.

Model: the SenseVoice-shaped benchmark model (random weights, real architecture and size;
``kitt-stt models build sensevoice-bench``), int8 by default.  For 3/6/15/30 s of audio it
times, per utterance (median of ``--repeats``): sherpa-onnx greedy, our greedy, each at batch
1 and 4, and our beam search with 4 and 8 active paths and 0/10/100 hotwords (batch 1).  Both
engines use one intra-op thread.  Ratios are computed from numbers measured side by side.

    python utils/performance/engine_bench.py --model ~/.cache/kitt-stt/models/sensevoice-bench
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.engine import AsrEngine, AsrRequest, DecodeOptions  # noqa: E402
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine  # noqa: E402
from kitt_stt.asr.sense_voice_model import load_sense_voice_model  # noqa: E402
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine  # noqa: E402
from kitt_stt.config.schema import AsrConfig  # noqa: E402
from kitt_stt.hotwords import Hotword  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402


def utterance(seconds: float, seed: int) -> np.ndarray:
    """Speech-like audio of the given length (tone bursts with pauses plus a little noise)."""
    audio = synthesize("打开车门ABCDEF关窗", ToneStyle(burst_ms=180, gap_ms=90, snr_db=25, seed=seed))
    repeats = int(np.ceil(seconds * 16000 / audio.shape[0]))
    return (np.tile(audio, repeats)[: int(seconds * 16000)] * 32767).astype(np.int16)


def per_utterance_ms(engine: AsrEngine, requests: list[AsrRequest], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        engine.decode_batch(requests)
        times.append((time.perf_counter() - started) * 1000.0 / len(requests))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="sensevoice-bench (or any SenseVoice) directory")
    parser.add_argument("--fp32", action="store_true", help="use model.onnx instead of model.int8.onnx")
    parser.add_argument("--lengths", type=float, nargs="+", default=[3, 6, 15, 30])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = load_sense_voice_model(args.model, prefer_int8=not args.fp32)
    print(f"model {model.model_path} ({model.model_path.stat().st_size / 1e6:.0f} MB), 1 thread per engine",
          file=sys.stderr)
    sherpa = SherpaSenseVoiceEngine(model, "bench", num_threads=1)
    engines = {"greedy": OrtSenseVoiceEngine(model, "bench", AsrConfig(num_threads=1))}
    for beam in (4, 8):
        engines[f"beam{beam}"] = OrtSenseVoiceEngine(
            model, "bench", AsrConfig(num_threads=1, decoding={"method": "beam", "max_active_paths": beam}))
    hotword_sets = {count: tuple(Hotword(f"t{101 + 2 * i}t{102 + 2 * i}", 2.0) for i in range(count))
                    for count in (0, 10, 100)}
    warm = [AsrRequest(utterance(2, 0))]
    sherpa.decode_batch(warm)
    engines["greedy"].decode_batch(warm)
    rows = []
    for seconds in args.lengths:
        print(f"  {seconds:g} s ...", file=sys.stderr, flush=True)
        batch = [AsrRequest(utterance(seconds, seed)) for seed in range(4)]
        row = {"seconds": seconds,
               "sherpa_b1": per_utterance_ms(sherpa, batch[:1], args.repeats),
               "ours_b1": per_utterance_ms(engines["greedy"], batch[:1], args.repeats),
               "sherpa_b4": per_utterance_ms(sherpa, batch, args.repeats),
               "ours_b4": per_utterance_ms(engines["greedy"], batch, args.repeats)}
        for beam in (4, 8):
            for count, words in hotword_sets.items():
                request = [AsrRequest(batch[0].samples, DecodeOptions(hotwords=words))]
                row[f"beam{beam}_hw{count}"] = per_utterance_ms(engines[f"beam{beam}"], request, args.repeats)
        rows.append(row)
    print("| audio | sherpa greedy b1 (ms) | ours greedy b1 | ours/sherpa | sherpa b4 (per utt.) | ours b4 | "
          "ours/sherpa | RTF ours b1 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['seconds']:g} s | {row['sherpa_b1']:.0f} | {row['ours_b1']:.0f} | "
              f"{row['ours_b1'] / row['sherpa_b1']:.2f} | {row['sherpa_b4']:.0f} | {row['ours_b4']:.0f} | "
              f"{row['ours_b4'] / row['sherpa_b4']:.2f} | {row['ours_b1'] / 1000 / row['seconds']:.3f} |")
    print("\n| audio | greedy (ms) | beam 4, 0 / 10 / 100 hotwords | beam 8, 0 / 10 / 100 hotwords | "
          "beam 4 (100 hw) / greedy |")
    print("|---|---|---|---|---|")
    for row in rows:
        beam4 = " / ".join(f"{row[f'beam4_hw{c}']:.0f}" for c in (0, 10, 100))
        beam8 = " / ".join(f"{row[f'beam8_hw{c}']:.0f}" for c in (0, 10, 100))
        print(f"| {row['seconds']:g} s | {row['ours_b1']:.0f} | {beam4} | {beam8} | "
              f"{row['beam4_hw100'] / row['ours_b1']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
