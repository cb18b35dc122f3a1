"""How many language detections a segment pays for (issue 20's cost; docs/models.md, "Language
detection"): through one seat of the real pipeline with a counting detector, a turn's first
segment longer than the decision point runs two (an early one for its first interim, then the
decision on its first 1.8 s); a shorter one runs one, which its final keeps. And with one allowed
language nothing is detected, yet the segment reports it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, DecodeOptions, StageTimer
from kitt_stt.asr.language import DEFAULT_MIN_SAMPLES, LanguageGuess, TurnLanguage
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.settings import SessionSettings
from tests.engine_wrappers import WrappedEngine
from tests.helpers import of_type, stream_through_seat, tone_pcm


class CountingDetections(WrappedEngine):
    """The tone engine behind a Whisper-like language step that says en and records the samples
    each detection read."""

    def __init__(self, inner: AsrEngine) -> None:
        super().__init__(inner)
        self.detections: list[int] = []
        self._lock = threading.Lock()

    def _detect(self, audio: np.ndarray) -> LanguageGuess:
        with self._lock:
            self.detections.append(audio.shape[0])
        return LanguageGuess("en", 0.9)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        results = []
        for request in requests:
            guess = request.options.detected_language(request.samples, self._detect)
            explicit = replace(request, options=replace(request.options, language=guess.lang, segment_language=None))
            results.append(replace(self.inner.decode_batch([explicit], timer)[0], lang=guess.lang))
        return results


@pytest.fixture(scope="module")
def tone_engine(tone_dir: Path) -> OrtSenseVoiceEngine:
    return OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone", AsrConfig())


async def _stream(engine: AsrEngine, pcm: bytes) -> list[dict[str, Any]]:
    """One seat of the real pipeline (VAD, interims at 1 s then every second, no chunk cuts),
    ``language: auto`` within zh and en, fed ``pcm`` in real time; its frames."""
    config = AppConfig.model_validate({"asr": {"chunk_pause_ms": 0}, "turn": {"model": None, "wait_ms": 300},
                                       "interim": {"enabled": True, "start_ms": 1000, "min_interval_ms": 1000}})
    settings = SessionSettings(language="auto", interim=True, languages=("zh", "en"))
    return await stream_through_seat(engine, config, settings, pcm + bytes(32 * 1000), wait_ms=300, workers=2,
                                     realtime=True, timeout=15)


@pytest.mark.timeout(60)
async def test_a_long_first_segment_runs_an_early_detection_and_the_decision(tone_engine) -> None:
    """Its first interim (1 s, the turn has no language yet) detects early; the decision reads the
    segment's first 1.8 s; nothing else detects, however many pieces decode."""
    engine = CountingDetections(tone_engine)
    frames = await _stream(engine, tone_pcm("打开车门关窗打开车门", lead_ms=300, tail_ms=0))
    [final] = of_type(frames, "final")
    assert final["timing"]["audio_ms"] >= 1800 + 1000, final
    assert len(of_type(frames, "interim")) >= 2, frames
    assert len(engine.detections) == 2 and engine.detections[0] < DEFAULT_MIN_SAMPLES <= engine.detections[1]
    assert final["lang"] == "en" and final["lang_probability"] == 0.9


@pytest.mark.timeout(60)
async def test_a_short_segment_detects_once_and_its_final_keeps_it(tone_engine) -> None:
    engine = CountingDetections(tone_engine)
    frames = await _stream(engine, tone_pcm("打开车门", lead_ms=300, tail_ms=0))
    [final] = of_type(frames, "final")
    assert 1000 < final["timing"]["audio_ms"] < 1800, final
    assert len(engine.detections) == 1, engine.detections
    assert final["lang"] == "en" and final["lang_probability"] == 0.9


def test_one_allowed_language_is_recorded_with_its_probability() -> None:
    """With one allowed language nothing is detected, yet the segment records it: a short
    segment's pieces all report it with probability 1.0."""
    def never(_audio: np.ndarray) -> LanguageGuess:
        raise AssertionError("nothing to detect with one allowed language")

    turn = TurnLanguage()
    options = DecodeOptions(language="auto", languages=("en",), segment_language=turn.segment())
    short = np.zeros(16000, dtype=np.int16)  # 1 s: below the decision point
    assert options.detected_language(short, never) == LanguageGuess("en", 1.0)  # an interim
    assert options.detected_language(short, never) == LanguageGuess("en", 1.0)  # the final
    assert options.language_probability() == 1.0 and turn.guess == LanguageGuess("en", 1.0)


class EarlyGuessWrong(WrappedEngine):
    """Whisper's failure on the README's English example: on less than the decision point's audio
    the language step says zh, on more en, and a piece decoded in zh comes back as Mandarin."""

    MANDARIN = "生命的天"

    @staticmethod
    def _detect(audio: np.ndarray) -> LanguageGuess:
        return LanguageGuess("zh" if audio.shape[0] < DEFAULT_MIN_SAMPLES else "en", 0.8)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        results = []
        for request in requests:
            guess = request.options.detected_language(request.samples, self._detect)
            explicit = replace(request, options=replace(request.options, language=guess.lang, segment_language=None))
            [result] = self.inner.decode_batch([explicit], timer)
            results.append(replace(result, lang=guess.lang, text=self.MANDARIN if guess.lang == "zh" else result.text))
        return results


@pytest.mark.timeout(60)
async def test_a_chunk_decoded_in_the_early_guess_is_decoded_again_in_the_final_language(tone_engine) -> None:
    """The first chunk closes at a pause before the segment has 1.8 s, so it decodes in the early
    guess (zh); the tail decides en. The final must be English throughout, as its label says."""
    engine = EarlyGuessWrong(tone_engine)
    # a 400 ms pause: ~280 ms unvoiced after webrtcvad's hangover, a chunk cut (200) inside one segment (500)
    config = AppConfig.model_validate({"asr": {"chunk_pause_ms": 200}, "vad": {"silence_ms": 500},
                                       "turn": {"model": None, "wait_ms": 300}, "interim": {"enabled": False}})
    settings = SessionSettings(language="auto", interim=False, languages=("zh", "en"))
    pcm = tone_pcm("打开车门", lead_ms=300, tail_ms=400) + tone_pcm("关窗打开车门", lead_ms=0, tail_ms=0)
    frames = await stream_through_seat(engine, config, settings, pcm + bytes(32 * 1000), wait_ms=300, workers=2,
                                       realtime=True, timeout=15)
    [final] = of_type(frames, "final")
    assert final["timing"]["chunks"] >= 2, final  # a chunk was cut before the decision point
    assert final["lang"] == "en" and EarlyGuessWrong.MANDARIN not in final["text"], final
    assert final["text"].replace(" ", "") == "打开车门关窗打开车门", final


@pytest.mark.timeout(60)
async def test_no_interim_joins_a_chunk_decoded_in_the_early_guess(tone_engine) -> None:
    """The same segment with interims: once the tail decodes in en (the decision), an interim that
    joined the first chunk as decoded in zh read 生命的天 followed by English (a real-time run of
    whisper-base gave the interim 生命的天d). Every interim is in one language."""
    engine = EarlyGuessWrong(tone_engine)
    config = AppConfig.model_validate({"asr": {"chunk_pause_ms": 200}, "vad": {"silence_ms": 500},
                                       "turn": {"model": None, "wait_ms": 300},
                                       "interim": {"enabled": True, "start_ms": 500, "min_interval_ms": 300}})
    settings = SessionSettings(language="auto", interim=True, languages=("zh", "en"))
    pcm = tone_pcm("打开车门", lead_ms=300, tail_ms=400) + tone_pcm("关窗打开车门关窗", lead_ms=0, tail_ms=0)
    frames = await stream_through_seat(engine, config, settings, pcm + bytes(32 * 1000), wait_ms=300, workers=2,
                                       realtime=True, timeout=15)
    interims = [frame["text"] for frame in of_type(frames, "interim")]
    mandarin = EarlyGuessWrong.MANDARIN
    later = [text for text in interims if text.replace(" ", "") not in ("", mandarin)]
    assert later, interims  # interims after the decision were sent (the test would pass vacuously otherwise)
    assert not [text for text in later if mandarin in text], interims
    [final] = of_type(frames, "final")
    assert final["lang"] == "en" and mandarin not in final["text"], final
