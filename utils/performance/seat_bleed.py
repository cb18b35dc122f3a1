"""Seat-bleed benchmark: a synthetic 2- and 4-seat cabin, seat arbitration on and off, one table.

Each cabin is built from the project's recordings (``tests/fixtures/speech``: one human speaker and
espeak-ng's English and Mandarin): one seat speaks, every other seat's microphone hears the same
voice ``--bleed`` dB weaker and 1-3 ms later (a different delay per seat), clean or in road noise
(brown noise plus an engine hum, half of it common to every microphone as road rumble is, at 10 dB
SNR on the speaking seat, so a -15 dB copy lies 5 dB under the noise). Double talk: two seats speak
different recordings at once, 0-300 ms apart, each hearing the other at -6 dB, 2 ms later (on 4
seats the two others hear both at -10 dB). Every arrangement is run with each seat as the speaker.

Each seat runs what a seat runs (the real ``VadSegmenter`` and ``SeatGate``, one ``Arbiter`` per
cabin), frames interleaved seat by seat as a car sends them. Counted:

* bleeding seats: segments the VAD opened (without arbitration each is a final and a commit of the
  speaker's words on the wrong seat), and those arbitration let through ("false segments kept");
* the speaking seat: utterances left without a kept segment ("lost"), and segments of it that
  arbitration dropped while another was kept ("cut");
* double talk: cases where both speakers keep a segment.

    python utils/performance/seat_bleed.py                   # webrtc + front end and Silero (~6 min on 2 cores)
    python utils/performance/seat_bleed.py --engines webrtc   # no Silero model needed
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.vad import FRAME_SAMPLES, SpeechEnded, SpeechStarted, VadSegmenter  # noqa: E402
from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.config.schema import ModelsConfig, VadConfig  # noqa: E402
from kitt_stt.models.registry import resolve_model  # noqa: E402
from kitt_stt.pipeline.arbitration import Arbiter  # noqa: E402
from utils.performance import cabin_noise  # noqa: E402

SPEECH_DIR = REPO / "tests" / "fixtures" / "speech"
LEAD_MS, TAIL_MS = 600, 900
BLEEDS_DB = (-6.0, -10.0, -15.0)
ROAD_SNR_DB = 10.0
TALKER_RMS = 32768.0 * 10.0 ** (-26.0 / 20.0)


@dataclass
class Tally:
    """Counts for one row of the table."""

    cabins: int = 0
    bleed_opened: int = 0  # segments the VAD opened on bleeding seats
    bleed_kept: int = 0  # ... that arbitration let through
    utterances: int = 0
    lost: int = 0  # speaking-seat utterances with no kept segment
    cut: int = 0  # speaking-seat segments dropped while another of its segments was kept
    double_talk: int = 0
    both_kept: int = 0
    decide_s: list[float] = field(default_factory=list)


def recordings(directory: Path = SPEECH_DIR) -> list[np.ndarray]:
    """The recordings (16 kHz mono WAVs; the fixtures by default), each at the same speech level
    (-26 dBFS while voiced): every talker as loud at their own microphone, whatever the gain."""
    voices = []
    for path in sorted(directory.glob("*.wav")):
        samples = read_wav_16k_mono(path)
        voices.append(samples.astype(np.float64) * TALKER_RMS / np.sqrt(cabin_noise.voiced_power(samples)))
    return voices


def delayed(samples: np.ndarray, delay: int, length: int, offset: int = 0) -> np.ndarray:
    out = np.zeros(length)
    start = offset + delay
    out[start : start + samples.shape[0]] = samples[: max(0, length - start)]
    return out


#: The road noise's two parts: brown noise and an engine hum (what the thresholds were chosen on), or
#: pink noise and a fan (``--road pink-fan``: a noise the tuning never saw).
ROADS = {"brown-engine": (cabin_noise.brown, cabin_noise.engine), "pink-fan": (cabin_noise.pink, cabin_noise.fan)}
Road = tuple[Callable[[int, np.random.Generator], np.ndarray], Callable[[int, np.random.Generator], np.ndarray]]


def road_noise(road: Road, seats: int, length: int, level: float, rng: np.random.Generator) -> list[np.ndarray]:
    """The road's two noises, half common to all microphones (road rumble), half each its own."""
    first, second = road
    common = first(length, rng) + second(length, rng)
    common /= np.sqrt(np.mean(common**2))
    out = []
    for _ in range(seats):
        own = first(length, rng) + second(length, rng)
        own /= np.sqrt(np.mean(own**2))
        out.append(level * np.sqrt(0.5) * (common + own))
    return out


def run_cabin(config: VadConfig, microphones: list[np.ndarray], tally: Tally,
              ) -> list[list[tuple[int, int, bool]]]:
    """Every seat's segments as (start_ms, end_ms, kept), frames interleaved seat by seat."""
    arbiter = Arbiter(config, lambda _: None)
    seats = [(VadSegmenter(config), arbiter.gate(f"seat{index}")) for index in range(len(microphones))]
    segments: list[list[tuple[int, int, bool]]] = [[] for _ in microphones]
    opened: list[int | None] = [None] * len(microphones)
    kept = [False] * len(microphones)
    pcm = [cabin_noise.to_int16(mic) for mic in microphones]
    for offset in range(0, pcm[0].shape[0] - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        for index, (vad, gate) in enumerate(seats):
            frame = pcm[index][offset : offset + FRAME_SAMPLES]
            gate.hear(frame)
            events = vad.process(frame)
            for event in events:  # what the VAD opened, whatever arbitration makes of it
                if isinstance(event, SpeechStarted):
                    opened[index], kept[index] = event.audio_ms, False
                elif isinstance(event, SpeechEnded) and opened[index] is not None:
                    segments[index].append((opened[index] or 0, event.end_ms, kept[index]))
                    opened[index] = None
            began = time.perf_counter()
            admitted = gate.admit(events, vad.audio_ms)
            if any(isinstance(event, SpeechStarted) for event, _ in admitted):
                tally.decide_s.append(time.perf_counter() - began)
                kept[index] = True
    for index, (vad, _) in enumerate(seats):  # the end of the stream closes what is open
        if opened[index] is not None:
            segments[index].append((opened[index] or 0, vad.audio_ms, kept[index]))
    return segments


def overlaps(segment: tuple[int, int, bool], span: tuple[int, int]) -> bool:
    return segment[0] < span[1] and segment[1] > span[0]


def bleed_case(config: VadConfig, voice: np.ndarray, seats: int, speaker: int, bleed_db: float, road: Road | None,
               rng: np.random.Generator, tally: Tally) -> None:
    lead, tail = LEAD_MS * 16, TAIL_MS * 16
    length = lead + voice.shape[0] + tail
    gain = 10.0 ** (bleed_db / 20.0)
    others = [seat for seat in range(seats) if seat != speaker]
    microphones = [np.zeros(length) for _ in range(seats)]
    microphones[speaker] = delayed(voice, 0, length, lead)
    for rank, seat in enumerate(others):
        microphones[seat] = gain * delayed(voice, 16 * (1 + rank % 3), length, lead)  # 1, 2, 3 ms
    if road is not None:
        microphones = in_road_noise(microphones, voice, road, rng)
    segments = run_cabin(config, microphones, tally)
    tally.cabins += 1
    speech = (LEAD_MS, LEAD_MS + voice.shape[0] // 16)
    tally.utterances += 1
    own = segments[speaker]
    if not any(kept and overlaps((start, end, kept), speech) for start, end, kept in own):
        tally.lost += 1
    if any(kept for *_, kept in own):
        tally.cut += sum(1 for *_, kept in own if not kept)
    for seat in others:
        tally.bleed_opened += len(segments[seat])
        tally.bleed_kept += sum(1 for *_, kept in segments[seat] if kept)


def in_road_noise(microphones: list[np.ndarray], voice: np.ndarray, road: Road,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Every microphone with its road noise, ``ROAD_SNR_DB`` under ``voice``'s speech level."""
    level = np.sqrt(cabin_noise.voiced_power(voice.astype(np.int16))) / 10.0 ** (ROAD_SNR_DB / 20.0)
    noises = road_noise(road, len(microphones), microphones[0].shape[0], level, rng)
    return [mic + noise for mic, noise in zip(microphones, noises, strict=True)]


def double_talk_case(config: VadConfig, first: np.ndarray, second: np.ndarray, seats: int, pair: tuple[int, int],
                     stagger_ms: int, road: Road | None, rng: np.random.Generator, tally: Tally) -> None:
    lead, tail = LEAD_MS * 16, TAIL_MS * 16
    length = lead + stagger_ms * 16 + max(first.shape[0], second.shape[0]) + tail
    voices = {pair[0]: (first, 0), pair[1]: (second, stagger_ms * 16)}
    microphones = [np.zeros(length) for _ in range(seats)]
    for seat in range(seats):
        for talker, (voice, start) in voices.items():
            if seat == talker:
                microphones[seat] += delayed(voice, 0, length, lead + start)
            else:
                gain = 10.0 ** ((-6.0 if seat in voices else -10.0) / 20.0)
                microphones[seat] += gain * delayed(voice, 32, length, lead + start)
    if road is not None:
        microphones = in_road_noise(microphones, first, road, rng)
    segments = run_cabin(config, microphones, tally)
    tally.double_talk += 1
    kept_both = all(any(kept for *_, kept in segments[talker]) for talker in voices)
    tally.both_kept += int(kept_both)
    for seat in range(seats):
        if seat not in voices:
            tally.bleed_opened += len(segments[seat])
            tally.bleed_kept += sum(1 for *_, kept in segments[seat] if kept)


def engines(names: list[str], cache_dir: Path | None) -> dict[str, VadConfig]:
    found: dict[str, VadConfig] = {}
    if "webrtc" in names:
        found["webrtc + front end"] = VadConfig()
    if "silero" in names:
        silero = resolve_model("silero-vad", ModelsConfig(cache_dir=cache_dir), setting="silero-vad",
                               directory_kind="vad").directory
        found["silero"] = VadConfig(engine="silero", model=str(silero))
    return found


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", nargs="+", default=["webrtc", "silero"], choices=["webrtc", "silero"])
    parser.add_argument("--noise", nargs="+", default=["clean", "road"], choices=["clean", "road"])
    # off adds nothing the VAD column does not show (without arbitration every segment the VAD opens is kept)
    parser.add_argument("--arbitration", nargs="+", default=["on"], choices=["on", "off"])
    parser.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: the user cache)")
    parser.add_argument("--speech", type=Path, default=SPEECH_DIR,
                        help="a folder of 16 kHz mono WAVs (default: the fixtures the thresholds were chosen on)")
    parser.add_argument("--road", choices=sorted(ROADS), default="brown-engine", help="the road noise's make-up")
    args = parser.parse_args()
    voices = recordings(args.speech)
    rng = np.random.default_rng(36)
    print(f"# Seat bleed: {len(voices)} recordings from {args.speech}; bleed 1-3 ms later; road noise "
          f"({args.road}) at {ROAD_SNR_DB:g} dB SNR on the speaking seat")
    print("| VAD | arbitration | seats | case | noise | cabins | bleeding-seat segments (VAD) | false segments "
          "kept | dropped | speaking seat lost | cut | double talk both kept |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    decide: list[float] = []
    for (name, base), arbitration, seats, road in itertools.product(
            engines(args.engines, args.cache_dir).items(), [mode == "on" for mode in args.arbitration], (2, 4),
            [ROADS[args.road] if noise == "road" else None for noise in args.noise]):
        config = base.model_copy(update={"arbitration": arbitration})
        noise = "clean" if road is None else "road"
        for bleed_db in BLEEDS_DB:
            tally = Tally()
            for voice, speaker in itertools.product(voices, range(seats)):
                bleed_case(config, voice, seats, speaker, bleed_db, road, rng, tally)
            decide += tally.decide_s if arbitration else []
            print(f"| {name} | {'on' if arbitration else 'off'} | {seats} | bleed {bleed_db:g} dB | {noise} | "
                  f"{tally.cabins} | {tally.bleed_opened} | {tally.bleed_kept} | "
                  f"{percent(tally.bleed_opened - tally.bleed_kept, tally.bleed_opened)} | "
                  f"{tally.lost}/{tally.utterances} | {tally.cut} | - |")
        tally = Tally()
        for (first, second), stagger in itertools.product(itertools.permutations(range(len(voices)), 2), (0, 300)):
            for pair in ((0, 1),) if seats == 2 else ((0, 1), (0, 2), (1, 3)):
                double_talk_case(config, voices[first], voices[second], seats, pair, stagger, road, rng, tally)
        decide += tally.decide_s if arbitration else []
        print(f"| {name} | {'on' if arbitration else 'off'} | {seats} | double talk | {noise} | {tally.double_talk} | "
              f"{tally.bleed_opened} | {tally.bleed_kept} | "
              f"{percent(tally.bleed_opened - tally.bleed_kept, tally.bleed_opened)} | - | - | "
              f"{percent(tally.both_kept, tally.double_talk)} |")
    if decide:
        print(f"\nadmit() when a held segment is decided: median {np.median(decide) * 1e3:.2f} ms, "
              f"max {max(decide) * 1e3:.2f} ms (one comparison per other seat)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
