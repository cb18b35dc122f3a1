"""The cabin VAD benchmark's end-to-end half: noisy speech through real servers, in real time.

For each VAD setting and noise condition, a clip is streamed at real time (1 s of noise before
the speech, 3 s after) and the tool records whether a final with the right words arrived, how long
after the end of the speech it came, and how many empty finals the noise caused. The tone model
checks exact text (webrtc settings only: Silero does not hear the tone language); whisper-base
checks human recordings by word error rate (the fixture's CMU Sphinx speaker; pocketsphinx-testdata's
LibriVox sentences and alsa-utils' channel voices when installed). Called by ``cabin_vad.py --e2e``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from kitt_stt.client.session import connect
from kitt_stt.config.schema import ModelsConfig
from kitt_stt.models.tone_synth import ToneStyle, synthesize
from tests.helpers import frames_of, run_server
from utils.performance import cabin_noise
from utils.performance.speech import to_16k, trim_silence
from utils.performance.text_distance import edit_distance, words
from utils.performance.toolkit.stats import nearest_rank
from utils.performance.toolkit.tables import markdown_table

REPO = Path(__file__).resolve().parents[2]
CONDITIONS: list[tuple[str, float | None]] = [("clean", None), ("brown", 10.0), ("brown", 5.0), ("engine", 10.0),
                                              ("engine", 5.0)]
SETTINGS: dict[str, dict[str, Any]] = {
    "webrtc 0.2 (no front end)": {"engine": "webrtc", "highpass_hz": 0, "noise_gate_db": 0},
    "webrtc + front end": {"engine": "webrtc"},
    "silero": {"engine": "silero", "model": "silero-vad"},
}
TONE_PHRASE = "打开车门"
SPHINX = Path("/usr/share/pocketsphinx/test/data/librivox")
ALSA = Path("/usr/share/sounds/alsa")
#: human recordings and their words (numbers as Whisper writes them)
HUMAN = {REPO / "tests" / "fixtures" / "speech" / "en_go_forward_ten_meters.wav": "go forward 10 meters",
         SPHINX / "sense_and_sensibility_01_austen_64kb-0880.wav": "he was not an ill disposed young man",
         SPHINX / "sense_and_sensibility_01_austen_64kb-0930.wav": "he might even have been made amiable himself",
         ALSA / "Front_Left.wav": "front left", ALSA / "Rear_Right.wav": "rear right"}


async def _stream(url: str, speech: np.ndarray, noise: str, snr: float | None, language: str | None
                  ) -> tuple[list[str], float | None]:
    """Texts of the finals and the first non-empty final's delay after the end of speech (ms)."""
    lead, tail = 16000, 3 * 16000
    clip = np.concatenate([np.zeros(lead, np.int16), speech, np.zeros(tail, np.int16)])
    if snr is not None:
        clip = cabin_noise.mix(clip, cabin_noise.SYNTHETIC[noise](clip.shape[0], np.random.default_rng(21)), snr)
    frames = frames_of(clip.astype("<i2").tobytes())
    speech_end_frame = (lead + speech.shape[0]) // 320  # the clip is trimmed to its speech
    finals: list[str] = []
    first_final_at: list[float] = []
    speech_end_at = 0.0
    async with connect(url) as session:
        if language:
            await session.configure(language=language)

        async def collect() -> None:
            async for message in session.frames():
                if message["type"] == "final":
                    finals.append(message["text"])
                    if message["text"] and not first_final_at:
                        first_final_at.append(time.monotonic())

        collector = asyncio.create_task(collect())
        started = time.monotonic()
        for index, frame in enumerate(frames):
            await asyncio.sleep(max(0.0, started + index * 0.02 - time.monotonic()))
            await session.send_audio(frame)
            if index == speech_end_frame:
                speech_end_at = time.monotonic()
        await asyncio.sleep(0.5)
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
    delay = (first_final_at[0] - speech_end_at) * 1000.0 if first_final_at else None
    return finals, delay


def _table(title: str, rows: dict[str, dict[str, str]]) -> None:
    columns = [f"{noise} {'' if snr is None else f'{snr:.0f} dB'}".strip() for noise, snr in CONDITIONS]
    print(f"\n## {title}")
    lines = [[setting, *(cells.get(column, "-") for column in columns)] for setting, cells in rows.items()]
    print(markdown_table(["setting", *columns], lines))


def _cell(outcomes: list[tuple[bool, float | None, int]]) -> str:
    right = sum(ok for ok, _, _ in outcomes)
    delays = [delay for ok, delay, _ in outcomes if ok and delay is not None]
    empty = sum(count for _, _, count in outcomes)
    p50 = nearest_rank(delays, 50)
    return f"{right}/{len(outcomes)}, {'-' if p50 is None else f'{p50:.0f} ms'}, {empty} empty"


def run_e2e(models: ModelsConfig, work: Path) -> None:
    cache = models.cache_dir or Path.home() / ".cache" / "kitt-stt" / "models"
    tone = trim_silence(cabin_noise.to_int16(synthesize(TONE_PHRASE, ToneStyle()) * 32767))
    tone_rows: dict[str, dict[str, str]] = {}
    for setting, vad in SETTINGS.items():
        if vad["engine"] != "webrtc":
            continue
        overrides = {"vad": {**vad, "silence_ms": 200}}
        with run_server(work, cache, overrides) as server:
            for noise, snr in CONDITIONS:
                finals, delay = asyncio.run(_stream(server.url, tone, noise, snr, None))
                ok = [text for text in finals if text] == [TONE_PHRASE]
                column = f"{noise} {'' if snr is None else f'{snr:.0f} dB'}".strip()
                tone_rows.setdefault(setting, {})[column] = _cell([(ok, delay, finals.count(""))])
    _table(f"Tone model, '{TONE_PHRASE}': exact final, its delay after the end of speech, empty finals",
           tone_rows)
    human_rows: dict[str, dict[str, str]] = {}
    for setting, vad in SETTINGS.items():
        overrides = {"asr": {"model": "whisper-base"}, "interim": {"enabled": False},
                     "vad": {**vad, "silence_ms": 200}}
        with run_server(work, cache, overrides) as server:
            for noise, snr in CONDITIONS:
                outcomes = []
                for path, expected in HUMAN.items():
                    if not path.is_file():
                        continue
                    speech = trim_silence(to_16k(path, work / "e2e.wav"))
                    finals, delay = asyncio.run(_stream(server.url, speech, noise, snr, "en"))
                    heard = words(" ".join(finals))
                    error = edit_distance(heard, words(expected)) / len(words(expected))
                    outcomes.append((error <= 0.25, delay, finals.count("")))
                column = f"{noise} {'' if snr is None else f'{snr:.0f} dB'}".strip()
                human_rows.setdefault(setting, {})[column] = _cell(outcomes)
    _table(f"whisper-base, {sum(path.is_file() for path in HUMAN)} human recordings: finals with the words "
           "(WER <= 25 %), delay p50 after the end of speech, empty finals", human_rows)
