"""Cabin-noise benchmark for speech detection: every VAD engine and setting side by side, one run.

Detection (offline, the real ``VadSegmenter`` on 20 ms frames, as a seat runs it):

* noise alone (brown, pink, white, engine, fan, babble; Debian's ``sonic-pi-samples`` ambient loops
  when installed) at -30 and -25 dBFS: false ``speech_start`` a minute, and whether a segment is
  still open at the end;
* speech mixed with noise at 20, 10, 5 and 0 dB SNR (and clean): missed utterances, onset delay,
  end-of-speech delay (segment end minus the speech's last loud frame; the stop hysteresis
  ``vad.silence_ms`` is part of it), segments that overlap no speech, and segments still open
  1 s after the speech. Speech: human recordings (the fixtures' English, alsa-utils, pocketsphinx
  test data), espeak-ng English and Mandarin, and the tone test language.
* CPU: detector time per second of audio, per seat.

With ``--e2e``, the same speech goes through a real server and the turn's text is checked: the tone
phrase on the tone model (webrtc settings only: Silero does not hear buzzes), and the human
fixtures on whisper-base (word error rate), at clean, 10 and 5 dB brown and engine noise, with the
final's delay after the end of speech (real time).

All noise here is synthetic except the sonic-pi loops and babble (overlapped recordings).

    python utils/performance/cabin_vad.py                # detection table (~2 min on 2 cores)
    python utils/performance/cabin_vad.py --e2e          # + text through real servers (~6 min)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.audio.vad import SpeechEnded, SpeechStarted, VadSegmenter  # noqa: E402
from kitt_stt.audio.wavfile import read_wav_16k_mono  # noqa: E402
from kitt_stt.config.schema import ModelsConfig, VadConfig  # noqa: E402
from kitt_stt.models.registry import resolve_model  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402
from utils.performance import cabin_noise  # noqa: E402
from utils.performance.speech import espeak, to_16k, trim_silence  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402

SPEECH_DIR = REPO / "tests" / "fixtures" / "speech"
ALSA_DIR = Path("/usr/share/sounds/alsa")  # alsa-utils: channel names spoken by a person
SPHINX_DIR = Path("/usr/share/pocketsphinx/test/data")  # pocketsphinx-testdata: read speech, digits
SONIC_PI = Path("/usr/share/sonic-pi/samples")
ESPEAK = [("en", "open the car door please"), ("en", "open the window"), ("en", "navigate to the nearest gas station"),
          ("cmn", "打开空调"), ("cmn", "导航到最近的加油站")]
TONE = ["打开车门", "关车窗AB", "开门CDEF"]
SNRS: list[float | None] = [None, 20.0, 10.0, 5.0, 0.0]


def settings(silero_dir: Path) -> dict[str, VadConfig]:
    silero = {"engine": "silero", "model": str(silero_dir)}
    return {
        "webrtc 0.2 (no front end)": VadConfig(highpass_hz=0, noise_gate_db=0),
        "webrtc + front end": VadConfig(),
        "silero": VadConfig(**silero),
        "silero, no high-pass": VadConfig(**silero, highpass_hz=0),
        "silero + gate 6 dB": VadConfig(**silero, noise_gate_db=6),
    }


@dataclass
class Clip:
    source: str
    samples: np.ndarray  # int16, trimmed to the speech


def speech_clips(work: Path) -> list[Clip]:
    clips = [Clip("human", trim_silence(read_wav_16k_mono(SPEECH_DIR / "en_go_forward_ten_meters.wav")))]
    recordings = (sorted(ALSA_DIR.glob("*_*.wav"))[:3] + sorted(SPHINX_DIR.glob("librivox/*.wav"))[:3]
                  + sorted(SPHINX_DIR.glob("cards/*.wav"))[:2])
    for path in recordings:
        clips.append(Clip("human", trim_silence(to_16k(path, work / "human.wav"))))
    if shutil.which("espeak-ng"):
        clips += [Clip(f"espeak-{voice}", espeak(text, voice, work)) for voice, text in ESPEAK]
    clips += [Clip("tone", cabin_noise.to_int16(synthesize(text, ToneStyle()) * 32767)) for text in TONE]
    return clips


def noises(clips: list[Clip]) -> dict[str, object]:
    found: dict[str, object] = dict(cabin_noise.SYNTHETIC)
    found["babble"] = cabin_noise.babble_from([clip.samples for clip in clips if clip.source != "tone"])
    return found


def sonic_pi_loops(work: Path) -> dict[str, np.ndarray]:
    """Real recordings (CC0) when Debian's sonic-pi-samples is installed, looped to length."""
    loops = {}
    for name in ("ambi_drone", "ambi_haunted_hum", "vinyl_hiss", "ambi_lunar_land"):
        path = SONIC_PI / f"{name}.flac"
        if path.is_file():
            samples = to_16k(path, work / "loop.wav").astype(np.float64)
            loops[f"sonic-pi {name}"] = samples / max(1e-9, float(np.sqrt(np.mean(samples**2))))
    return loops


def segments(config: VadConfig, samples: np.ndarray) -> tuple[list[tuple[int, int | None]], float]:
    """[(start_ms, end_ms or None while open)], detector seconds spent."""
    segmenter = VadSegmenter(config)
    found: list[tuple[int, int | None]] = []
    spent = 0.0
    for offset in range(0, samples.shape[0] - 319, 320):
        began = time.perf_counter()
        events = segmenter.process(samples[offset : offset + 320])
        spent += time.perf_counter() - began
        for event in events:
            if isinstance(event, SpeechStarted):
                found.append((event.audio_ms, None))
            elif isinstance(event, SpeechEnded) and found:
                found[-1] = (found[-1][0], event.end_ms)
    return found, spent


def tile(unit_noise, samples: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(unit_noise, np.ndarray):
        return np.resize(unit_noise, samples)
    return unit_noise(samples, rng)


def noise_alone(configs: dict[str, VadConfig], sources: dict[str, object], seconds: int) -> None:
    print(f"\n## Noise alone ({seconds} s each): false speech_start a minute (* = a segment still open at the end)")
    print("| noise | dBFS | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    cpu: dict[str, float] = dict.fromkeys(configs, 0.0)
    for name, source in sources.items():
        for level in (-30.0, -25.0):
            samples = cabin_noise.to_int16(cabin_noise.at_level(
                tile(source, 16000 * seconds, np.random.default_rng(5)), level))
            cells = []
            for label, config in configs.items():
                found, spent = segments(config, samples)
                cpu[label] += spent / seconds
                cells.append(f"{len(found) * 60 / seconds:.1f}{'*' if found and found[-1][1] is None else ''}")
            print(f"| {name} | {level:.0f} | " + " | ".join(cells) + " |")
    runs = 2 * len(sources)
    print("\nDetector CPU per seat: " + ", ".join(f"{label} {100 * spent / runs:.2f} % of a core"
                                                  for label, spent in cpu.items()))


def speech_in_noise(configs: dict[str, VadConfig], clips: list[Clip], sources: dict[str, object]) -> None:
    print("\n## Speech in noise (brown, engine, pink, fan): missed / onset delay p50 / end delay p50, p95 / "
          "extra segments / open 1 s after speech (ms; end delay: segment end minus the clip's end)")
    _speech_table(configs, clips, sources, ("brown", "engine", "pink", "fan"), SNRS)
    print("\n## Speech over babble (4 other voices at once: speech, so every engine may keep listening)")
    _speech_table(configs, [clip for clip in clips if clip.source != "tone"], sources, ("babble",), [20.0, 10.0])


def _speech_table(configs: dict[str, VadConfig], clips: list[Clip], sources: dict[str, object],
                  noise_names: tuple[str, ...], snrs: list[float | None]) -> None:
    print("| source | SNR | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    for source in sorted({clip.source for clip in clips}):
        group = [clip for clip in clips if clip.source == source]
        for snr in snrs:
            names = noise_names if snr is not None else ("none",)
            cells = [_speech_cell(config, group, sources, names, snr) for config in configs.values()]
            print(f"| {source} ({len(group)}) | {'clean' if snr is None else f'{snr:.0f} dB'} | "
                  + " | ".join(cells) + " |")


def _speech_cell(config: VadConfig, group: list[Clip], sources: dict[str, object], noise_names: tuple[str, ...],
                 snr: float | None) -> str:
    missed = extra = still_open = runs = 0
    onsets: list[float] = []
    ends: list[float] = []
    for noise_name in noise_names:
        for clip in group:
            padded = np.concatenate([np.zeros(16000, np.int16), clip.samples, np.zeros(32000, np.int16)])
            if snr is not None:
                unit = tile(sources[noise_name], padded.shape[0], np.random.default_rng(9))
                padded = cabin_noise.mix(padded, unit, snr)
            begin_ms, end_ms = 1000, 1000 + clip.samples.shape[0] // 16
            found, _ = segments(config, padded)
            runs += 1
            overlapping = [(s, e) for s, e in found if s < end_ms and (e is None or e > begin_ms)]
            extra += len(found) - len(overlapping)
            if not overlapping:
                missed += 1
                continue
            onsets.append(overlapping[0][0] - begin_ms)
            last_end = overlapping[-1][1]
            if last_end is None or last_end > end_ms + 1000:
                still_open += 1
            else:
                ends.append(last_end - end_ms)
    onset = nearest_rank(onsets, 50)
    end50, end95 = nearest_rank(ends, 50), nearest_rank(ends, 95)
    return (f"{missed}/{runs} / {_ms(onset)} / {_ms(end50)}, {_ms(end95)} / {extra} / {still_open}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--noise-seconds", type=int, default=60)
    parser.add_argument("--e2e", action="store_true", help="also the turn's text through real servers")
    parser.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: the user cache)")
    args = parser.parse_args()
    models = ModelsConfig(cache_dir=args.cache_dir)
    silero_dir = resolve_model("silero-vad", models, setting="silero-vad", directory_kind="vad").directory
    configs = settings(silero_dir)
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        clips = speech_clips(work)
        sources = noises(clips)
        print(f"# Cabin VAD benchmark: {len(clips)} clips "
              f"({', '.join(sorted({clip.source for clip in clips}))}); synthetic noise unless named")
        noise_alone(configs, {**sources, **sonic_pi_loops(work)}, args.noise_seconds)
        speech_in_noise(configs, clips, sources)
        if args.e2e:
            from utils.performance.cabin_vad_e2e import run_e2e

            run_e2e(models, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
