"""Evaluate end-of-turn settings through the real server.

For each named setting (a set of configuration overrides) a real ``kitt-stt serve`` runs with
the TurnSense model; complete and incomplete utterances are streamed over real WebSockets
(speech sent at once, then silence in real time so VAD and timers run on the wall clock). An
incomplete utterance is followed by a thinking pause of ``--pause-ms`` and then the rest of the
sentence, as a person who stops to think would go on. The tool reports, per setting and source:

* commit latency after the end of speech for complete utterances (p50/p95, nearest rank);
* incomplete utterances committed during the pause (the user was cut off);
* ``turn_eager`` events (the session asks for them) and how many were followed by
  ``turn_resumed`` (an agent that started on its answer threw the work away);
* the model's probabilities and their AUC (complete vs incomplete) per source.

Sources: espeak-ng (English; Mandarin with the ``cmn-latn-pinyin`` voice) and, when installed,
human recordings from Debian packages (alsa-utils' channel-test voices, pocketsphinx-testdata).
Synthetic speech is a poor judge of this model (see docs/turns.md); results are per source.
With ``asr.model=whisper-base`` in a setting the turns have real words, so the text-aware hold
(``turn.hold_unfinished``) acts; the tone model hears no words in real speech.

    python utils/performance/eot_eval.py --settings \
        "old:vad.silence_ms=500,asr.chunk_pause_ms=200,turn.hold_unfinished=false" \
        "new:asr.model=whisper-base" --out eot.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.client.session import SttSession, connect  # noqa: E402
from kitt_stt.config.schema import AppConfig  # noqa: E402
from tests.helpers import FRAME_BYTES, deep_merge, run_server, send_pcm  # noqa: E402
from utils.performance.speech import espeak, to_16k, trim_silence  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.turns.scores import auc  # noqa: E402

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
# The outside check (issue 35): one speaker's read telephone prompts (asterisk-core-sounds-en-wav,
# 8 kHz, CC-BY-SA-3.0), never used to fit or tune anything; only with ``--sources asterisk``.
ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
ASTERISK_TEXT = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")


@dataclass
class Utterance:
    source: str
    name: str
    complete: bool
    samples: np.ndarray
    rest: np.ndarray | None = None  # what an incomplete utterance's speaker says after the pause


@dataclass
class Outcome:
    source: str
    name: str
    complete: bool
    setting: str
    reason: str | None
    probability: float | None
    latency_ms: float | None  # end of (first part of) speech -> first commit
    cut_off: bool = False  # an incomplete utterance committed before its speaker went on
    eager: int = 0
    eager_resumed: int = 0  # turn_eager frames followed by turn_resumed
    text: str = ""
    text_ending: str | None = None
    early_ms: float | None = None  # end of speech -> first turn_eager or commit, what an agent drafting early waits


def _cut_at_pause(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Cut at the quietest 100 ms stretch between 30 % and 70 % of the clip (a word boundary);
    returns the two parts."""
    hop = 160
    energy = np.array([np.mean(samples[i : i + 1600].astype(np.float64) ** 2)
                       for i in range(0, len(samples) - 1600, hop)])
    if energy.size < 10:
        return None
    lo, hi = int(0.3 * energy.size), int(0.7 * energy.size)
    cut = (lo + int(np.argmin(energy[lo:hi]))) * hop + 800
    return trim_silence(samples[:cut]), trim_silence(samples[cut:])


def build_corpus(work: Path) -> tuple[list[Utterance], list[str]]:
    corpus: list[Utterance] = []
    notes: list[str] = []
    if shutil.which("espeak-ng") and shutil.which("sox"):
        for source, voice, pairs in (("espeak-en", "en", ENGLISH), ("espeak-cmn", "cmn-latn-pinyin", MANDARIN)):
            for full, partial in pairs:
                corpus.append(Utterance(source, full, True, espeak(full, voice, work)))
                rest = full[len(partial):].strip()
                corpus.append(Utterance(source, partial, False, espeak(partial, voice, work),
                                        espeak(rest, voice, work) if rest else None))
    else:
        notes.append("espeak-ng or sox missing: synthetic sources skipped (apt-get install espeak-ng sox)")
    human = sorted(ALSA_DIR.glob("*_*.wav")) + sorted(SPHINX_DIR.glob("librivox/*.wav")) + sorted(
        SPHINX_DIR.glob("cards/*.wav"))
    if human and shutil.which("sox"):
        for path in human:
            samples = trim_silence(to_16k(path, work / "human.wav"))
            corpus.append(Utterance("human", path.name, True, samples))
            parts = _cut_at_pause(samples)
            if parts is not None and len(parts[0]) > 4000:
                corpus.append(Utterance("human", path.name + "[cut]", False, parts[0], parts[1]))
    else:
        notes.append("no human recordings (apt-get install alsa-utils pocketsphinx-testdata)")
    prompts = asterisk_prompts()
    if prompts and shutil.which("sox"):
        for name in prompts:
            samples = trim_silence(to_16k(ASTERISK_DIR / f"{name}.wav", work / "asterisk.wav"))
            corpus.append(Utterance("asterisk", name, True, samples))
            parts = _cut_at_pause(samples)
            if parts is not None and len(parts[0]) > 4000:
                corpus.append(Utterance("asterisk", name + "[cut]", False, parts[0], parts[1]))
    return corpus, notes


def asterisk_texts() -> dict[str, str]:
    """Each asterisk prompt's transcript by name (the package's ``core-sounds-en.txt``); {} without it."""
    if not ASTERISK_TEXT.is_file():
        return {}
    with gzip.open(ASTERISK_TEXT, "rt", encoding="utf-8", errors="replace") as lines:
        return {name: text.strip() for name, _, text in (line.partition(":") for line in lines)
                if text.strip() and not name.startswith(";") and "/" not in name}


def asterisk_prompts(most: int = 36) -> list[str]:
    """One-sentence prompts of 6-14 words that end as a sentence (not "..."), each text once, by
    name; every k-th of them so that at most ``most`` remain. A fixed rule, not a choice by result."""
    chosen: dict[str, str] = {}
    for name, text in asterisk_texts().items():
        if ("[" in text or text.endswith("...") or re.search(r"[.?!]", text.rstrip(".?! "))
                or not 6 <= len(text.split()) <= 14 or not (ASTERISK_DIR / f"{name}.wav").is_file()
                or text.lower() in chosen.values()):
            continue
        chosen[name] = text.lower()
    names = sorted(chosen)
    step = max(1, -(-len(names) // most))
    return names[::step]


async def _silence(session: SttSession, seat: str, ms: int, stop: asyncio.Event) -> None:
    """Silence in real time, on absolute deadlines, until ``ms`` pass or ``stop`` is set."""
    started = time.monotonic()
    for index in range(ms // 20):
        if stop.is_set():
            return
        await asyncio.sleep(max(0.0, started + index * 0.02 - time.monotonic()))
        await session.send_audio(bytes(FRAME_BYTES), seat=seat)


async def _speech(session: SttSession, seat: str, samples: np.ndarray) -> None:
    await send_pcm(session, samples.astype("<i2").tobytes(), seat=seat)  # at once, as fast as it goes


async def _run_one(url: str, utterance: Utterance, seat: str, setting: str, silence_ms: int,
                   pause_ms: int) -> Outcome:
    received: list[tuple[float, dict]] = []
    committed = asyncio.Event()
    async with connect(url) as session:
        await session.start(eager=True)

        async def collect() -> None:
            async for message in session.frames():
                received.append((time.monotonic(), message))
                if message["type"] == "commit":
                    committed.set()

        collector = asyncio.create_task(collect())
        await _speech(session, seat, np.concatenate([np.zeros(8000, dtype=np.int16), utterance.samples]))
        speech_end = time.monotonic()
        resumed_at = None
        if utterance.rest is not None:  # the thinking pause, then the rest unless already committed
            await _silence(session, seat, pause_ms, committed)
            if not committed.is_set():
                resumed_at = time.monotonic()
                await _speech(session, seat, utterance.rest)
        await _silence(session, seat, silence_ms, committed)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(committed.wait(), timeout=10)
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
    frames = [m for _, m in received]
    commits = [(at, m) for at, m in received if m["type"] == "commit"]
    eager = sum(1 for m in frames if m["type"] == "turn_eager")
    resumed = sum(1 for m in frames if m["type"] == "turn_resumed")
    if not commits:
        return Outcome(utterance.source, utterance.name, utterance.complete, setting, None, None, None,
                       eager=eager, eager_resumed=resumed)
    commit_at, commit = commits[0]
    decision = commit["metadata"]["eot"]["decision"]
    cut_off = utterance.rest is not None and (resumed_at is None or commit_at < resumed_at)
    early_at = min(at for at, m in received if m["type"] in ("turn_eager", "commit"))
    return Outcome(utterance.source, utterance.name, utterance.complete, setting, decision["reason"],
                   decision["probability"], (commit_at - speech_end) * 1000.0, cut_off, eager, resumed,
                   commit["text"], decision.get("text_ending"), (early_at - speech_end) * 1000.0)


def parse_setting(spec: str) -> tuple[str, dict]:
    """``name:section.key=value,...`` -> (name, nested overrides); values are YAML scalars."""
    name, _, body = spec.partition(":")
    overrides: dict = {}
    for item in filter(None, body.split(",")):
        path, _, raw = item.partition("=")
        node = overrides
        *parents, leaf = path.strip().split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(raw)
    return name, overrides


async def evaluate(corpus: list[Utterance], settings: list[str], cache: Path, work: Path, seats: int,
                   silence_ms: int, pause_ms: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for spec in settings:
        name, overrides = parse_setting(spec)
        # The shipped defaults (the test configuration shortens some), the end-of-turn model, and
        # commit_empty: the tone model cannot transcribe real speech, and turns without text are
        # otherwise not committed; with it the decision is evaluated, not the text.
        shipped = AppConfig()
        base = {"turn": {**shipped.turn.model_dump(mode="json"), "model": "turnsense", "commit_empty": True},
                "vad": shipped.vad.model_dump(mode="json"), "interim": shipped.interim.model_dump(mode="json"),
                "asr": {"chunk_pause_ms": shipped.asr.chunk_pause_ms, "max_chunk_ms": shipped.asr.max_chunk_ms}}
        with run_server(work, cache, deep_merge(base, overrides)) as server:
            pending = list(corpus)
            done = 0
            while pending:
                batch, pending = pending[:seats], pending[seats:]
                results = await asyncio.gather(*(
                    _run_one(server.url, utterance, f"s{i}", name, silence_ms, pause_ms)
                    for i, utterance in enumerate(batch)))
                outcomes.extend(results)
                done += len(batch)
                print(f"\r  setting {name}: {done}/{len(corpus)} utterances", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
    return outcomes


def report(outcomes: list[Outcome], names: list[str]) -> str:
    lines = ["| setting | source | complete: commit latency p50 / p95 ms | "
             "complete: first turn_eager or commit p50 ms | "
             "incomplete cut off during the pause | model commits (complete / incomplete) | "
             "turn_eager (followed by turn_resumed) |", "|---|---|---|---|---|---|---|"]
    for name in names:
        rows = [o for o in outcomes if o.setting == name]
        for source in [*sorted({o.source for o in rows}), "all"]:
            chosen = [o for o in rows if source in ("all", o.source)]
            complete = [o.latency_ms for o in chosen if o.complete and o.latency_ms is not None]
            incomplete = [o for o in chosen if not o.complete]
            cut = sum(1 for o in incomplete if o.cut_off)
            model_c = sum(1 for o in chosen if o.complete and o.reason == "model")
            model_i = sum(1 for o in incomplete if o.reason == "model" and o.cut_off)
            eager = sum(o.eager for o in chosen)
            wasted = sum(o.eager_resumed for o in chosen)
            p50, p95 = nearest_rank(complete, 50), nearest_rank(complete, 95)
            latency = f"{p50:.0f} / {p95:.0f}" if p50 is not None and p95 is not None else "-"
            early = nearest_rank([o.early_ms for o in chosen if o.complete and o.early_ms is not None], 50)
            lines.append(f"| {name} | {source} | {latency} | {'-' if early is None else f'{early:.0f}'} | "
                         f"{cut}/{len(incomplete)} | "
                         f"{model_c}/{len(chosen) - len(incomplete)} / {model_i}/{len(incomplete)} | "
                         f"{eager} ({wasted}) |")
    first = [o for o in outcomes if o.setting == names[0]]
    lines += ["", f"AUC of p, setting {names[0]} (the first decision of each utterance):", "",
              "| source | AUC of p (complete vs incomplete) | p complete (median) | p incomplete (median) |",
              "|---|---|---|---|"]
    for source in sorted({o.source for o in first}):
        pos = [o.probability for o in first if o.source == source and o.complete and o.probability is not None]
        neg = [o.probability for o in first if o.source == source and not o.complete and o.probability is not None]
        lines.append(f"| {source} | {auc(pos + neg, [True] * len(pos) + [False] * len(neg)):.2f} | "
                     f"{np.median(pos):.3f} | {np.median(neg):.3f} |" if pos and neg else f"| {source} | - | - | - |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The tone model hears no words in real speech (it writes stray "A"s, the English article),
    # so its settings leave the words out; the whisper-base ones show what holding on them does.
    parser.add_argument("--settings", nargs="+", default=[
        "0.1:vad.silence_ms=500,asr.chunk_pause_ms=200,turn.hold_unfinished=false",
        "silence300:vad.silence_ms=300,asr.chunk_pause_ms=150,turn.hold_unfinished=false",
        "default:turn.hold_unfinished=false",
        "wait1000:turn.wait_ms=1000,turn.hold_unfinished=false",
        "threshold0.95:turn.threshold=0.95,turn.hold_unfinished=false",
        "whisper,no-hold:asr.model=whisper-base,turn.hold_unfinished=false",
        "whisper:asr.model=whisper-base"],
        help="name:section.key=value,... (overrides on the shipped defaults, with turnsense and commit_empty)")
    parser.add_argument("--seats", type=int, default=4, help="utterances streamed concurrently")
    parser.add_argument("--silence-ms", type=int, default=3500, help="trailing silence streamed after speech")
    parser.add_argument("--pause-ms", type=int, default=1500,
                        help="the thinking pause after an incomplete utterance; a commit in it cuts the user off")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: user cache dir)")
    parser.add_argument("--out", type=Path, help="write raw outcomes as JSON")
    parser.add_argument("--sources", nargs="*", help="only these sources (espeak-en, espeak-cmn, human; asterisk: "
                        "the outside check, apt-get install asterisk-core-sounds-en-wav)")
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    cache = args.cache or default_cache_dir()
    with tempfile.TemporaryDirectory(prefix="eot-eval-") as tmp:
        work = Path(tmp)
        corpus, notes = build_corpus(work)
        # the outside check's recordings only when asked for: they judge, they are never the default
        corpus = [u for u in corpus if (u.source in args.sources if args.sources else u.source != "asterisk")]
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        counts = {s: sum(1 for u in corpus if u.source == s) for s in sorted({u.source for u in corpus})}
        print(f"corpus: {counts}", file=sys.stderr)
        outcomes = asyncio.run(evaluate(corpus, args.settings, cache, work, args.seats, args.silence_ms,
                                        args.pause_ms))
    print(report(outcomes, [parse_setting(spec)[0] for spec in args.settings]))
    if args.out:
        args.out.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
