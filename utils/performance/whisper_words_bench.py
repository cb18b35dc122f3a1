"""Whisper's word times (asr/whisper_timing.py) against forced alignments, and what they cost.

    PYTHONPATH=. python utils/performance/whisper_words_bench.py [--model whisper-base]

Recordings: the human English clips whose transcripts are known (alsa-utils' speaker-test voices,
pocketsphinx-testdata's LibriVox and cards; ``utils/turns/corpus.py`` reads the same). Reference:
pocketsphinx 5 aligns the transcript to the audio (its US English model; each word's first and
last 10 ms frame). Ours: whisper-base on ``asr.engine: ort``, language en, words on. A clip counts
where Whisper's words, lower-cased without punctuation, are the transcript's; on those, each
word's start and end against the alignment (median and p90 of |difference|, and the mean signed
difference: positive is later than the alignment). Cost: the engine
call with words on and off, alternated, the median per clip.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from kitt_stt.asr.engine import AsrEngine, AsrRequest, DecodeOptions
from kitt_stt.asr.factory import build_engine
from kitt_stt.config.schema import AppConfig
from utils.performance.speech import to_16k, trim_silence
from utils.performance.text_distance import words as plain_words
from utils.turns.corpus import ALSA_DIR, SPHINX_DIR, _transcripts

PAD_MS = 300  # silence before and after each clip, as a VAD segment's pre-roll and end


def clips(work: Path) -> list[tuple[str, np.ndarray, str]]:
    found = []
    for path in sorted(ALSA_DIR.glob("*_*.wav")):
        found.append((path.stem, trim_silence(to_16k(path, work / "a.wav")), path.stem.replace("_", " ").lower()))
    for source, listing in (("librivox", "transcription"), ("cards", "cards.transcription")):
        folder = SPHINX_DIR / source
        if not folder.is_dir():
            continue
        texts = _transcripts(folder / listing)
        for path in sorted(folder.glob("*.wav")):
            if path.stem in texts:
                found.append((f"{source}/{path.stem}", trim_silence(to_16k(path, work / "a.wav")), texts[path.stem]))
    pad = np.zeros(PAD_MS * 16, dtype=np.int16)
    return [(name, np.concatenate([pad, samples, pad]), text) for name, samples, text in found]


def aligned(samples: np.ndarray, transcript: str) -> list[tuple[str, int, int]] | None:
    """(word, start ms, end ms) by pocketsphinx's forced alignment; None when it cannot align."""
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000, bestpath=False, loglevel="FATAL")
    try:
        decoder.set_align_text(transcript)
        decoder.start_utt()
        decoder.process_raw(samples.tobytes(), full_utt=True)
        decoder.end_utt()
        segments = list(decoder.seg())
    except (RuntimeError, ValueError, KeyError):
        return None
    words = [(seg.word.split("(")[0], seg.start_frame * 10, (seg.end_frame + 1) * 10) for seg in segments
             if not seg.word.startswith(("<", "["))]
    return words if len(words) == len(transcript.split()) else None


def timed(asr: AsrEngine, samples: np.ndarray, words: bool) -> tuple[float, list]:
    start = time.perf_counter()
    [result] = asr.decode_batch([AsrRequest(samples, DecodeOptions(language="en", words=words))])
    return time.perf_counter() - start, list(result.words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    asr = build_engine(AppConfig.model_validate({"asr": {"model": args.model, "engine": "ort"}}))
    starts, ends, on_costs, off_costs = [], [], [], []
    matched = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        recordings = clips(Path(tmp))
    for name, samples, transcript in recordings:
        total += 1
        reference = aligned(samples, transcript)
        _, words = timed(asr, samples, True)
        spelled = [plain_words(word.text) for word in words]  # "cold-hearted": two words of the transcript
        flat = [part for parts in spelled for part in parts]
        if reference is None or flat != [word for word, _, _ in reference]:
            print(f"  skipped {name}: {' '.join(flat)!r} vs {transcript!r}{'' if reference else ' (no alignment)'}")
            continue
        matched += 1
        position = 0
        for word, parts in zip(words, spelled, strict=True):
            if parts:
                first, last = reference[position], reference[position + len(parts) - 1]
                starts.append(word.start_ms - first[1])
                ends.append(word.end_ms - last[2])
                position += len(parts)
        on, off = [], []
        for _ in range(args.repeats):
            on.append(timed(asr, samples, True)[0])
            off.append(timed(asr, samples, False)[0])
        on_costs.append(statistics.median(on))
        off_costs.append(statistics.median(off))
    print(f"{matched} of {total} clips with Whisper's words equal to the transcript; {len(starts)} words")
    if starts:
        for label, signed in (("start", starts), ("end", ends)):
            errors = np.abs(signed)
            print(f"word {label} vs forced alignment: median |difference| {np.median(errors):.0f} ms, "
                  f"p90 {np.percentile(errors, 90):.0f} ms, max {errors.max()} ms, "
                  f"mean signed {np.mean(signed):+.0f} ms")
        on_total, off_total = sum(on_costs), sum(off_costs)
        print(f"engine call, words on vs off (sum of per-clip medians): {1000 * on_total:.0f} vs "
              f"{1000 * off_total:.0f} ms (x{on_total / off_total:.3f})")


if __name__ == "__main__":
    main()
