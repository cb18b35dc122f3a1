"""Choose ``asr.max_chunk_ms``: accuracy lost to length cuts vs the worst-case final's decode time.

Continuous speech (no pause of ``asr.chunk_pause_ms``) is cut when the open chunk reaches
``asr.max_chunk_ms``, at the quietest 20 ms frame of the last 2 s.  A short limit cuts inside
phrases (the decoder loses context on both sides of the cut); a long one makes the final after a
client ``vad stop`` during continuous speech decode an open tail up to ``max_chunk_ms`` long.

Accuracy: in-car passages of continuous English (espeak-ng, each read by every ``--voices``
voice, words joined without punctuation so it does not pause, 16 kHz via sox, over a -60 dBFS
noise floor) go through the
real front of a seat, offline: the ``VadSegmenter`` (webrtcvad, the shipped ``vad`` settings)
gives the segment and each frame's ``voiced``, the real ``ChunkTracker`` cuts the chunks (a
``vad stop`` right after the last word ends the segment), and whisper-base, built by the
server's factory, decodes every chunk and the open tail (as the seat does: the tail only if it
holds speech) and, for reference, each whole segment.  Chunk texts are joined with
``join_texts``.  Reported as word error ratios over all passages: chunked vs whole-segment
decode, and chunked vs the words espeak read.

Latency: the SenseVoice-shaped benchmark model (``sensevoice-bench``, one intra-op thread, as the
server's factory builds it) decodes a tail of exactly ``max_chunk_ms`` of the same speech (the
worst case above): median of ``--repeats`` runs, with the fbank computed from scratch (no interim
saw the tail) and as left by interims (all but the last ``interim.min_interval_ms`` already
seen), and the last of 4 such finals queued at once on ``asr.workers`` decode threads.  The
same tail is also timed on whisper-base (the shipped ``asr.model``), whose cost grows with it.

    python utils/performance/chunk_tradeoff.py [--cache ~/.cache/kitt-stt/models] \
        [--max-chunk-ms 2000 3000 4000 5000 6000 8000 10000] [--repeats 7]

No server is started.  The recommendation printed at the end is the smallest ``max_chunk_ms``
whose chunked-vs-reference error is within ``--tolerance`` points of the whole-segment decode's;
where no limit tried is (every cut costs accuracy), the knee: the smallest limit from which no
longer limit tried lowers that error by ``--knee`` points or more per extra second.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.engine import AsrEngine, AsrRequest, DecodeOptions  # noqa: E402
from kitt_stt.asr.factory import build_engine  # noqa: E402
from kitt_stt.asr.features import FeatureStream  # noqa: E402
from kitt_stt.asr.whisper_model import LONGEST_AUDIO_MS  # noqa: E402
from kitt_stt.audio.buffer import PcmBuffer  # noqa: E402
from kitt_stt.audio.vad import FRAME_MS, FRAME_SAMPLES, EndReason, SpeechAudio, SpeechEnded, SpeechStarted, VadSegmenter  # noqa: E402
from kitt_stt.config.schema import AppConfig, AsrConfig, ModelsConfig  # noqa: E402
from kitt_stt.models.registry import default_cache_dir  # noqa: E402
from kitt_stt.pipeline.chunks import ChunkTracker, CutKind  # noqa: E402
from kitt_stt.pipeline.text_join import join_texts  # noqa: E402
from utils.performance.speech import espeak  # noqa: E402
from utils.performance.text_distance import edit_distance, words  # noqa: E402

# Requests a driver might chain without pausing; no numbers or spelling variants (Whisper writes
# "10" for "ten", "centre" for "center"), so the reference is the words themselves.
PASSAGES = [
    "navigate to the nearest gas station and then turn on the air conditioning please set the "
    "temperature a little lower and play some relaxing jazz music from my favorite playlist and when we "
    "get close to the station remind me to check the pressure in the front tires because the warning "
    "light came on this morning",
    "call my wife and tell her that I will be home late tonight because the traffic on the highway "
    "is really bad and ask her if she needs anything from the grocery store on the way back then send "
    "a message to my boss saying that I will join the meeting from the car and that he should start "
    "without me",
    "open the window on the passenger side close the sunroof turn up the volume and skip to the "
    "next song because I do not like this one at all and then show me the weather for tomorrow "
    "morning and tell me if it is going to rain during the drive to the office so that I can leave "
    "a little earlier than usual",
    "find a quiet italian restaurant downtown that is still open late tonight and has "
    "parking for the car then send the address to my phone and remind me to call them first to ask "
    "whether they have a table for our whole family on the terrace and whether they can prepare something "
    "for a guest who does not eat meat",
    "turn off the seat heater on my side switch the lights to automatic mode and tell me how far "
    "it is to the next charging station with a fast charger because the battery is getting low "
    "and I want to arrive before the meeting starts and please avoid the toll roads and the tunnel "
    "under the river if the detour is not much longer",
    "read my latest messages out loud and reply to the one from my brother saying that the "
    "football match starts after dinner and that he should bring the tickets with him and also ask "
    "my sister whether she wants to come with us and if she says yes book a parking space near the "
    "stadium for the whole evening",
    "what is the speed limit on this road and is there any construction ahead on my route to "
    "the airport if there is a faster way please take it and let me know when we will arrive then "
    "check the status of my flight and tell me which terminal it leaves from and where the closest "
    "parking garage to that terminal is",
]
LEAD_MS = 500  # noise floor before the speech, so the VAD opens the segment as it would live
SHORT_CHUNK_MS = 500  # closed chunks shorter than this are counted (a cut soon after a cut)


@dataclass
class Passage:
    reference: str
    samples: np.ndarray  # int16 16 kHz: LEAD_MS of noise floor, then the speech (over it)


@dataclass
class Segment:
    buffer: np.ndarray  # the segment's audio as the seat buffers it (pre-roll included)
    chunks: list[tuple[int, int]] = field(default_factory=list)  # closed chunks, sample ranges
    limit_cuts: int = 0
    pause_cuts: int = 0
    tail_start: int = 0
    tail_needs_decode: bool = True


def build_passages(work: Path, voices: list[str], wpm: int, gap: int, noise_dbfs: float) -> list[Passage]:
    """Each text in each voice, after ``LEAD_MS`` of silence, over a seeded white noise floor: a
    microphone never gives digital silence, whose frames tie for quietest (and webrtcvad hears it
    as no audio at all)."""
    passages = []
    rng = np.random.default_rng(0)
    for voice, text in ((voice, text) for voice in voices for text in PASSAGES):
        speech = espeak(text, voice, work, "-s", str(wpm), "-g", str(gap))
        speech = np.concatenate([speech, np.zeros((-speech.shape[0]) % FRAME_SAMPLES, np.int16)])
        samples = np.concatenate([np.zeros(LEAD_MS * 16, np.int16), speech]).astype(np.float64)
        samples += rng.normal(0.0, 32768 * 10 ** (noise_dbfs / 20), samples.shape[0])
        passages.append(Passage(text, np.clip(np.round(samples), -32768, 32767).astype(np.int16)))
    return passages


def chunk(samples: np.ndarray, config: AppConfig) -> list[Segment]:
    """The seat's segmenting and chunking (``seat._on_audio``), offline; a client ``vad stop``
    right after the last frame ends the open segment.  Segments that end within the lead-in are
    left out: webrtcvad calls the first frames of a noise floor speech while it adapts, which
    opens a spurious segment of pre-roll and noise before the passage begins."""
    vad = VadSegmenter(config.vad)
    asr = config.asr
    segments: list[Segment] = []
    buffer = PcmBuffer()
    tracker: ChunkTracker | None = None

    def close(ended_at: int) -> None:
        nonlocal tracker
        if tracker is None:
            return
        segment = segments[-1]
        segment.buffer = buffer.view().copy()
        segment.tail_start, segment.tail_needs_decode = tracker.open_start, tracker.tail_needs_decode
        tracker = None
        if ended_at <= LEAD_MS * 16:
            segments.pop()

    frames = samples.reshape(-1, FRAME_SAMPLES)
    for index, frame in enumerate(frames):
        events = vad.process(frame) + (vad.force_end(EndReason.STOP) if index == len(frames) - 1 else [])
        for event in events:
            if isinstance(event, SpeechStarted):
                close((index + 1) * FRAME_SAMPLES)
                buffer = PcmBuffer()
                buffer.append(event.preroll)
                tracker = ChunkTracker(pause_frames=asr.chunk_pause_ms // FRAME_MS,
                                       max_chunk_samples=asr.max_chunk_ms * 16, lag_samples=vad.decision_lag_samples)
                segments.append(Segment(np.zeros(0, np.int16)))
            elif isinstance(event, SpeechAudio) and tracker is not None:
                buffer.append(event.samples)
                cut = tracker.boundary_after(event.voiced, buffer.view())
                if cut is not None:  # offline there is no decode cap: every cut is admitted
                    segments[-1].chunks.append(tracker.cut(cut.position, None))
                    if cut.kind is CutKind.LIMIT:
                        segments[-1].limit_cuts += 1
                    else:
                        segments[-1].pause_cuts += 1
            elif isinstance(event, SpeechEnded):
                close((index + 1) * FRAME_SAMPLES)
    return segments


class Decoder:
    """Whisper decodes, memoised by audio range (pause cuts repeat across limits)."""

    def __init__(self, engine: AsrEngine, language: str) -> None:
        self._engine = engine
        self._options = DecodeOptions(language=language)
        self._texts: dict[tuple[int, int, int], str] = {}
        self.decodes = 0

    def text(self, key: int, buffer: np.ndarray, start: int, end: int) -> str:
        if (key, start, end) not in self._texts:
            self.decodes += 1
            request = AsrRequest(buffer[start:end], self._options)
            self._texts[(key, start, end)] = self._engine.decode_batch([request])[0].text
        return self._texts[(key, start, end)]


def chunked_text(decoder: Decoder, key: int, segments: list[Segment]) -> str:
    texts = []
    for index, segment in enumerate(segments):
        segment_key = key * 1000 + index
        texts += [decoder.text(segment_key, segment.buffer, start, end) for start, end in segment.chunks]
        if segment.tail_needs_decode:  # as seat._on_end: a pause-only tail adds nothing
            texts.append(decoder.text(segment_key, segment.buffer, segment.tail_start, segment.buffer.shape[0]))
    return join_texts(texts)


def whole_text(decoder: Decoder, key: int, segments: list[Segment]) -> str:
    return join_texts(decoder.text(key * 1000 + index, segment.buffer, 0, segment.buffer.shape[0])
                      for index, segment in enumerate(segments))


def error_ratio(pairs: list[tuple[str, str]]) -> float:
    """Word edits turning each hypothesis into its reference, over the references' words."""
    edits = sum(edit_distance(words(hypothesis), words(reference)) for hypothesis, reference in pairs)
    return edits / max(1, sum(len(words(reference)) for _, reference in pairs))


def time_tail(engine: AsrEngine, tail: np.ndarray, seen_samples: int | None, repeats: int) -> float:
    """Median ms of one decode of ``tail``; ``seen_samples``: how much of it the segment's fbank
    stream already holds (None: no stream, the engine computes the features itself)."""
    times = []
    for _ in range(repeats):
        stream = None
        if seen_samples is not None:
            stream = FeatureStream()
            stream.frames_for(tail[:seen_samples])
        request = AsrRequest(tail, DecodeOptions(language="en"), stream)
        started = time.perf_counter()
        engine.decode_batch([request])
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def time_queued(engine: AsrEngine, tail: np.ndarray, finals: int, workers: int, repeats: int) -> float:
    """Median ms until the last of ``finals`` simultaneous tail decodes on ``workers`` threads is done."""
    request = AsrRequest(tail, DecodeOptions(language="en"))
    times = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in range(repeats):
            started = time.perf_counter()
            for future in [pool.submit(engine.decode_batch, [request]) for _ in range(finals)]:
                future.result()
            times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def knee(rows: list[dict], points_per_s: float) -> dict:
    """The smallest limit from which no longer limit tried lowers the chunked-vs-reference error
    by ``points_per_s`` points or more per extra second of ``max_chunk_ms``."""
    ordered = sorted(rows, key=lambda row: row["limit"])
    for index, row in enumerate(ordered):
        gains = [100 * (row["vs_ref"] - later["vs_ref"]) / ((later["limit"] - row["limit"]) / 1000)
                 for later in ordered[index + 1 :]]
        if all(gain < points_per_s for gain in gains):  # true for the longest limit
            return row
    raise ValueError("no limits")


def recommend(rows: list[dict], whole_vs_ref: float, args: argparse.Namespace) -> str:
    """The smallest limit whose chunked-vs-reference error is within ``--tolerance`` points of the
    whole-segment decode's; where none is (cuts cost accuracy at every limit tried), the knee."""
    fitting = [row for row in rows if row["vs_ref"] <= whole_vs_ref + args.tolerance / 100 + 1e-9]
    if fitting:
        best = min(fitting, key=lambda row: row["limit"])
        why = (f"the smallest limit whose chunked-vs-reference error ({100 * best['vs_ref']:.1f} %) is within "
               f"{args.tolerance:g} point(s) of the whole-segment decode's ({100 * whole_vs_ref:.1f} %)")
    else:
        best = knee(rows, args.knee)
        why = (f"no limit tried comes within {args.tolerance:g} point(s) of the whole-segment decode "
               f"({100 * whole_vs_ref:.1f} %), so the knee: from it, no longer limit tried buys "
               f"{args.knee:g} point(s) of chunked-vs-reference error per extra second "
               f"({100 * best['vs_ref']:.1f} % here)")
    return (f"Recommendation: asr.max_chunk_ms={best['limit']}: {why}; its worst-case final decodes in "
            f"{best['scratch_ms']:.0f} ms on {args.latency_model} ({best['queued_ms']:.0f} ms for the last of "
            f"{args.finals} on {AppConfig().asr.workers} workers), {best['whisper_ms']:.0f} ms on {args.whisper}.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache_dir(),
                        help="model cache holding whisper-base and sensevoice-bench (installed there if missing)")
    parser.add_argument("--max-chunk-ms", type=int, nargs="+", default=[2000, 3000, 4000, 5000, 6000, 8000, 10000])
    parser.add_argument("--chunk-pause-ms", type=int, default=AppConfig().asr.chunk_pause_ms,
                        help="asr.chunk_pause_ms (default: the shipped one)")
    parser.add_argument("--whisper", default="whisper-base", help="model for the accuracy side")
    parser.add_argument("--latency-model", default="sensevoice-bench", help="model for the latency side")
    parser.add_argument("--language", default="en", help="language the sessions give Whisper")
    parser.add_argument("--voices", nargs="+", default=["en-us", "en"], help="espeak-ng voices (each reads all)")
    parser.add_argument("--noise-dbfs", type=float, default=-60.0, help="white noise floor under the speech (RMS)")
    parser.add_argument("--wpm", type=int, default=170, help="espeak-ng speed")
    parser.add_argument("--word-gap", type=int, default=1, help="espeak-ng -g (10 ms units at the default speed)")
    parser.add_argument("--repeats", type=int, default=7, help="timing runs per tail (median)")
    parser.add_argument("--whisper-repeats", type=int, default=3, help="timing runs per tail on the Whisper model")
    parser.add_argument("--finals", type=int, default=4, help="finals queued at once for the queued column")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="points of chunked-vs-reference error allowed over the whole-segment decode")
    parser.add_argument("--knee", type=float, default=1.0,
                        help="without a limit within --tolerance: points of error per extra second that still "
                             "justify a longer limit")
    args = parser.parse_args()
    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        print("espeak-ng and sox are needed (apt-get install espeak-ng sox)", file=sys.stderr)
        return 2
    shipped = AppConfig()
    pause_ms, workers = args.chunk_pause_ms, shipped.asr.workers
    models = ModelsConfig(cache_dir=args.cache)

    with tempfile.TemporaryDirectory() as tmp:
        passages = build_passages(Path(tmp), args.voices, args.wpm, args.word_gap, args.noise_dbfs)
    seconds = [p.samples.shape[0] / 16000 for p in passages]
    print(f"{len(passages)} passages, {min(seconds):.1f}-{max(seconds):.1f} s ({sum(seconds):.0f} s, "
          f"{LEAD_MS} ms lead-in each); chunk_pause_ms={pause_ms}, vad.aggressiveness={shipped.vad.aggressiveness}",
          file=sys.stderr)
    if max(seconds) * 1000 + shipped.vad.preroll_ms >= LONGEST_AUDIO_MS:
        print(f"a passage is too long for one Whisper decode ({LONGEST_AUDIO_MS} ms)", file=sys.stderr)
        return 2

    whisper_config = AppConfig(asr=AsrConfig(model=args.whisper, num_threads=1), models=models)
    print(f"building {args.whisper} ...", file=sys.stderr, flush=True)
    whisper = build_engine(whisper_config)
    decoder = Decoder(whisper, args.language)
    wholes = []
    for key, passage in enumerate(passages):
        segments = chunk(passage.samples, AppConfig(asr=AsrConfig(max_chunk_ms=10**6)))  # only to find the segments
        wholes.append(whole_text(decoder, key, segments))
    whole_vs_ref = error_ratio([(whole, p.reference) for whole, p in zip(wholes, passages, strict=True)])

    rows = []
    for limit in args.max_chunk_ms:
        config = AppConfig(asr=AsrConfig(chunk_pause_ms=pause_ms, max_chunk_ms=limit))
        chunked, chunks, limit_cuts, pause_cuts, longest_tail, short = [], 0, 0, 0, 0, 0
        for key, passage in enumerate(passages):
            print(f"\r  max_chunk_ms={limit}: passage {key + 1}/{len(passages)} ({decoder.decodes} decodes so far)",
                  end="", file=sys.stderr, flush=True)
            segments = chunk(passage.samples, config)
            chunked.append(chunked_text(decoder, key, segments))
            for segment in segments:
                chunks += len(segment.chunks) + segment.tail_needs_decode
                limit_cuts += segment.limit_cuts
                pause_cuts += segment.pause_cuts
                longest_tail = max(longest_tail, (segment.buffer.shape[0] - segment.tail_start) // 16)
                short += sum(1 for start, end in segment.chunks if end - start < SHORT_CHUNK_MS * 16)
        print(file=sys.stderr)
        rows.append({"limit": limit, "chunks": chunks, "limit_cuts": limit_cuts, "pause_cuts": pause_cuts,
                     "short": short,
                     "longest_tail": longest_tail,
                     "vs_whole": error_ratio(list(zip(chunked, wholes, strict=True))),
                     "vs_ref": error_ratio([(text, p.reference) for text, p in zip(chunked, passages, strict=True)]),
                     "texts": chunked})

    latency_config = AppConfig(asr=AsrConfig(model=args.latency_model, num_threads=1), models=models)
    print(f"building {args.latency_model} ...", file=sys.stderr, flush=True)
    engine = build_engine(latency_config)
    speech = np.concatenate([p.samples[LEAD_MS * 16 :] for p in passages])
    engine.decode_batch([AsrRequest(speech[:32000], DecodeOptions(language="en"))])  # warm up
    interim_ms = shipped.interim.min_interval_ms
    for row in rows:
        print(f"  timing a {row['limit']} ms tail ...", file=sys.stderr, flush=True)
        tail = speech[: row["limit"] * 16]
        row["scratch_ms"] = time_tail(engine, tail, None, args.repeats)
        row["interim_ms"] = time_tail(engine, tail, max(0, tail.shape[0] - interim_ms * 16), args.repeats)
        row["queued_ms"] = time_queued(engine, tail, args.finals, workers, args.repeats)
        row["whisper_ms"] = time_tail(whisper, tail, None, args.whisper_repeats)

    print(f"\n{len(passages)} espeak-ng passages of continuous speech ({', '.join(args.voices)} voices), "
          f"{sum(seconds):.0f} s, "
          f"{sum(len(words(p.reference)) for p in passages)} words; accuracy on {args.whisper} "
          f"(language {args.language}), asr.chunk_pause_ms={pause_ms}; latency on {args.latency_model}, "
          f"1 thread, median of {args.repeats}.\n")
    print(f"Whole-segment decode vs reference (every row's baseline): {100 * whole_vs_ref:.1f} %; one word is "
          f"{100 / sum(len(words(p.reference)) for p in passages):.2f} points.\n")
    print(f"| max_chunk_ms | chunks decoded (limit / pause cuts) | closed chunks < {SHORT_CHUNK_MS} ms | "
          f"longest open tail at vad stop (ms) | "
          f"chunked vs whole (WER %) | chunked vs reference (WER %) | worst-case tail decode, fbank from "
          f"scratch (ms) | same, fbank left by interims (ms) | last of {args.finals} such finals on "
          f"{workers} workers (ms) | same tail on {args.whisper} (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['limit']} | {row['chunks']} ({row['limit_cuts']} / {row['pause_cuts']}) | {row['short']} | "
              f"{row['longest_tail']} | {100 * row['vs_whole']:.1f} | {100 * row['vs_ref']:.1f} | "
              f"{row['scratch_ms']:.0f} | {row['interim_ms']:.0f} | {row['queued_ms']:.0f} | {row['whisper_ms']:.0f} |")
    print()
    print(recommend(rows, whole_vs_ref, args))
    print("\nTexts (smallest limit, then whole):", file=sys.stderr)
    for chunked_text_, whole, passage in zip(rows[0]["texts"], wholes, passages, strict=True):
        print(f"  ref:   {passage.reference}\n  chunk: {chunked_text_}\n  whole: {whole}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
