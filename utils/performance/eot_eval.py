"""Evaluate end-of-turn policies through the real server.

For each policy setting (threshold:wait_ms) a real ``kitt-stt serve`` runs with the TurnSense
model; complete and incomplete utterances are streamed over real WebSockets (speech sent at
once, then trailing silence in real time so VAD and timers run on the wall clock), and the
tool reports, per setting:

* commit latency after the end of speech for complete utterances (p50/p95, nearest rank);
* how often an incomplete utterance was committed "early", i.e. within ``--pause-ms`` (a user
  who pauses that long to think would have been cut off);
* the model's probabilities and their AUC (complete vs incomplete) per source.

Sources: espeak-ng (English; Mandarin with the ``cmn-latn-pinyin`` voice) and, when installed,
human recordings from Debian packages (alsa-utils' channel-test voices, pocketsphinx-testdata).
Synthetic speech is a poor judge of this model (see docs/turns.md); results are per source.

    python utils/performance/eot_eval.py --settings 0.5:1000 0.7:1000 0.9:1000 --out eot.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.client.session import connect  # noqa: E402
from tests.helpers import run_server  # noqa: E402

ENGLISH = [
    ("open the car door please", "open the car door and"),
    ("turn on the air conditioning", "turn on the"),
    ("what is the weather like today", "what is the"),
    ("navigate to the nearest gas station", "navigate to the nearest"),
    ("play some music", "play some"),
    ("call my wife", "call my"),
    ("set the temperature to twenty degrees", "set the temperature to"),
    ("close the window", "close the"),
]
MANDARIN = [
    ("da3 kai1 che1 men2", "da3 kai1"),
    ("guan1 bi4 che1 chuang1", "guan1 bi4"),
    ("bo1 fang4 yin1 yue4", "bo1 fang4"),
    ("dao3 hang2 dao4 zui4 jin4 de5 jia1 you2 zhan4", "dao3 hang2 dao4 zui4 jin4 de5"),
    ("ba3 kong1 tiao2 kai1 da4 yi1 dian3", "ba3 kong1 tiao2"),
]
ALSA_DIR = Path("/usr/share/sounds/alsa")
SPHINX_DIR = Path("/usr/share/pocketsphinx/test/data")


@dataclass
class Utterance:
    source: str
    name: str
    complete: bool
    samples: np.ndarray


@dataclass
class Outcome:
    source: str
    name: str
    complete: bool
    setting: str
    reason: str | None
    probability: float | None
    latency_ms: float | None


def _to_16k(src: Path, dst: Path) -> np.ndarray:
    subprocess.run(["sox", str(src), "-r", "16000", "-c", "1", "-b", "16", str(dst)], check=True,
                   capture_output=True)
    return read_wav_16k_mono(dst)


def _trim(samples: np.ndarray, threshold: int = 300) -> np.ndarray:
    loud = np.nonzero(np.abs(samples.astype(np.int32)) > threshold)[0]
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples


def _espeak(text: str, voice: str, work: Path) -> np.ndarray:
    raw = work / "espeak.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True, capture_output=True)
    return _trim(_to_16k(raw, work / "espeak16.wav"))


def _cut_at_pause(samples: np.ndarray) -> np.ndarray | None:
    """Cut at the quietest 100 ms stretch between 30 % and 70 % of the clip (a word boundary)."""
    hop = 160
    energy = np.array([np.mean(samples[i : i + 1600].astype(np.float64) ** 2)
                       for i in range(0, len(samples) - 1600, hop)])
    if energy.size < 10:
        return None
    lo, hi = int(0.3 * energy.size), int(0.7 * energy.size)
    cut = (lo + int(np.argmin(energy[lo:hi]))) * hop + 800
    return _trim(samples[:cut])


def build_corpus(work: Path) -> tuple[list[Utterance], list[str]]:
    corpus: list[Utterance] = []
    notes: list[str] = []
    if shutil.which("espeak-ng") and shutil.which("sox"):
        for source, voice, pairs in (("espeak-en", "en", ENGLISH), ("espeak-cmn", "cmn-latn-pinyin", MANDARIN)):
            for full, partial in pairs:
                corpus.append(Utterance(source, full, True, _espeak(full, voice, work)))
                corpus.append(Utterance(source, partial, False, _espeak(partial, voice, work)))
    else:
        notes.append("espeak-ng or sox missing: synthetic sources skipped (apt-get install espeak-ng sox)")
    human = sorted(ALSA_DIR.glob("*_*.wav")) + sorted(SPHINX_DIR.glob("librivox/*.wav")) + sorted(
        SPHINX_DIR.glob("cards/*.wav"))
    if human and shutil.which("sox"):
        for path in human:
            samples = _trim(_to_16k(path, work / "human.wav"))
            corpus.append(Utterance("human", path.name, True, samples))
            partial = _cut_at_pause(samples)
            if partial is not None and len(partial) > 4000:
                corpus.append(Utterance("human", path.name + "[cut]", False, partial))
    else:
        notes.append("no human recordings (apt-get install alsa-utils pocketsphinx-testdata)")
    return corpus, notes


async def _run_one(url: str, utterance: Utterance, seat: str, setting: str, silence_ms: int) -> Outcome:
    frame = 640
    lead = np.zeros(8000, dtype=np.int16)
    pcm = np.concatenate([lead, utterance.samples]).astype("<i2").tobytes()
    pcm += bytes((-len(pcm)) % frame)
    async with connect(url) as session:
        for offset in range(0, len(pcm), frame):
            await session.send_audio(pcm[offset : offset + frame], seat=seat)
        speech_end = time.monotonic()
        received: list[dict] = []

        async def collect() -> None:
            async for message in session.frames():
                received.append(message)
                if message["type"] == "commit":
                    return

        collector = asyncio.create_task(collect())
        started = time.monotonic()
        for index in range(silence_ms // 20):  # trailing silence in real time
            if collector.done():
                break
            await asyncio.sleep(max(0.0, started + index * 0.02 - time.monotonic()))
            await session.send_audio(bytes(frame), seat=seat)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(collector, timeout=10)
        commit_at = time.monotonic()
    commits = [m for m in received if m["type"] == "commit"]
    if not commits:
        return Outcome(utterance.source, utterance.name, utterance.complete, setting, None, None, None)
    decision = commits[0]["metadata"]["eot"]["decision"]
    return Outcome(utterance.source, utterance.name, utterance.complete, setting, decision["reason"],
                   decision["probability"], (commit_at - speech_end) * 1000.0)


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, int(np.ceil(q / 100.0 * len(ordered))) - 1)]


def auc(positives: list[float], negatives: list[float]) -> float | None:
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


async def evaluate(corpus: list[Utterance], settings: list[str], cache: Path, work: Path, seats: int,
                   silence_ms: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for setting in settings:
        threshold, wait_ms = setting.split(":")
        # commit_empty: the tone model cannot transcribe real speech, and turns without text are
        # otherwise not committed; the decision is what is evaluated here, not the text.
        overrides = {"turn": {"model": "turnsense", "threshold": float(threshold), "wait_ms": int(wait_ms),
                              "commit_empty": True},
                     "vad": {"silence_ms": 300}}
        with run_server(work, cache, overrides) as server:
            pending = list(corpus)
            done = 0
            while pending:
                batch, pending = pending[:seats], pending[seats:]
                results = await asyncio.gather(*(
                    _run_one(server.url, utterance, f"s{i}", setting, silence_ms) for i, utterance in enumerate(batch)))
                outcomes.extend(results)
                done += len(batch)
                print(f"\r  setting {setting}: {done}/{len(corpus)} utterances", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
    return outcomes


def report(outcomes: list[Outcome], settings: list[str], pause_ms: float) -> str:
    lines = ["| setting (threshold:wait_ms) | source | complete: commit latency p50 / p95 ms | "
             "incomplete committed within pause | model commits (complete / incomplete) |",
             "|---|---|---|---|---|"]
    for setting in settings:
        rows = [o for o in outcomes if o.setting == setting]
        for source in [*sorted({o.source for o in rows}), "all"]:
            chosen = [o for o in rows if source in ("all", o.source)]
            complete = [o.latency_ms for o in chosen if o.complete and o.latency_ms is not None]
            incomplete = [o for o in chosen if not o.complete]
            early = sum(1 for o in incomplete if o.latency_ms is not None and o.latency_ms < pause_ms)
            model_c = sum(1 for o in chosen if o.complete and o.reason == "model")
            model_i = sum(1 for o in incomplete if o.reason == "model")
            p50, p95 = nearest_rank(complete, 50), nearest_rank(complete, 95)
            lines.append(f"| {setting} | {source} | {p50:.0f} / {p95:.0f} | {early}/{len(incomplete)} | "
                         f"{model_c}/{len(chosen) - len(incomplete)} / {model_i}/{len(incomplete)} |"
                         if p50 is not None and p95 is not None else f"| {setting} | {source} | - | - | - |")
    first = [o for o in outcomes if o.setting == settings[0]]
    lines += ["", "| source | AUC of p (complete vs incomplete) | p complete (median) | p incomplete (median) |",
              "|---|---|---|---|"]
    for source in sorted({o.source for o in first}):
        pos = [o.probability for o in first if o.source == source and o.complete and o.probability is not None]
        neg = [o.probability for o in first if o.source == source and not o.complete and o.probability is not None]
        area = auc(pos, neg)
        lines.append(f"| {source} | {area:.2f} | {np.median(pos):.3f} | {np.median(neg):.3f} |"
                     if area is not None else f"| {source} | - | - | - |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=["0.5:1000", "0.7:1000", "0.9:1000", "1.0:1000"])
    parser.add_argument("--seats", type=int, default=4, help="utterances streamed concurrently")
    parser.add_argument("--silence-ms", type=int, default=2500, help="trailing silence streamed after speech")
    parser.add_argument("--pause-ms", type=float, default=1500.0,
                        help="a commit of an incomplete utterance sooner than this cuts the user off")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: user cache dir)")
    parser.add_argument("--out", type=Path, help="write raw outcomes as JSON")
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    cache = args.cache or default_cache_dir()
    with tempfile.TemporaryDirectory(prefix="eot-eval-") as tmp:
        work = Path(tmp)
        corpus, notes = build_corpus(work)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        counts = {s: sum(1 for u in corpus if u.source == s) for s in sorted({u.source for u in corpus})}
        print(f"corpus: {counts}", file=sys.stderr)
        outcomes = asyncio.run(evaluate(corpus, args.settings, cache, work, args.seats, args.silence_ms))
    print(report(outcomes, args.settings, args.pause_ms))
    if args.out:
        args.out.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
