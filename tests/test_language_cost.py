"""How many language detections a segment pays for (issue 20's cost). With interims' cheap guess
on (``asr.whisper.language_guess_pad_frames`` set; off by default), an interim before the
segment's language is known decodes in a cheap guess, so a long first segment runs one full
detection (not an early one and then the decision), and a short one decides once, on its whole
audio, with the piece its final keeps; off, interims detect in full as before."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, DecodeOptions, StageTimer
from kitt_stt.asr.factory import build_engine
from kitt_stt.asr.language import LanguageGuess, SegmentLanguage, TurnLanguage
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.eot import SilenceTimeoutPolicy
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.scheduler import InferenceScheduler
from tests.engine_wrappers import WrappedEngine
from tests.helpers import commits, frames_of, of_type, tone_pcm

SPEECH = Path(__file__).parent / "fixtures" / "speech"


class CountingDetections(WrappedEngine):
    """The tone engine behind a Whisper-like language step that counts its work: a full detection
    (says en) and the cheap guess an interim may use (says zh), each recorded with the samples it read."""

    def __init__(self, inner: AsrEngine) -> None:
        super().__init__(inner)
        self.detections: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def _counted(self, kind: str, lang: str, probability: float):
        def detect(audio: np.ndarray) -> LanguageGuess:
            with self._lock:
                self.detections.append((kind, audio.shape[0]))
            return LanguageGuess(lang, probability)
        return detect

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        results = []
        for request in requests:
            cheap = self._counted("cheap", "zh", 0.6) if request.provisional else None
            guess = request.options.detected_language(request.samples, self._counted("full", "en", 0.9), cheap)
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
    scheduler = InferenceScheduler(engine, workers=2)
    scheduler.start()
    frames: list[dict[str, Any]] = []
    settings = SessionSettings(language="auto", interim=True, languages=("zh", "en"))
    seat = SeatPipeline("driver", config, lambda: settings, scheduler, SilenceTimeoutPolicy(300),
                        lambda frame: frames.append(frame.model_dump()), owner="driver")
    try:
        started = time.monotonic()
        for index, frame in enumerate(frames_of(pcm + bytes(32 * 1000))):
            seat.push_audio(np.frombuffer(frame, dtype="<i2"))
            await asyncio.sleep(max(0.0, started + (index + 1) * 0.02 - time.monotonic()))
        deadline = time.monotonic() + 15
        while not commits(frames):
            assert time.monotonic() < deadline, frames
            await asyncio.sleep(0.02)
    finally:
        seat.close()
        scheduler.stop()
    return frames


@pytest.mark.timeout(60)
async def test_a_long_first_segment_runs_one_full_detection(tone_engine) -> None:
    """Its first interim (1 s, nothing detected yet) guesses cheaply; the decision at 1.8 s is the only
    full detection (0.4.0 ran two: an early one for that interim, then the decision)."""
    engine = CountingDetections(tone_engine)
    frames = await _stream(engine, tone_pcm("打开车门关窗打开车门", lead_ms=300, tail_ms=0))
    [final] = of_type(frames, "final")
    assert final["timing"]["audio_ms"] >= 1800 + 1000, final  # decided at an interim, not at the final
    assert of_type(frames, "interim"), frames
    kinds = [kind for kind, _samples in engine.detections]
    assert kinds.count("full") == 1 and kinds.count("cheap") == 1, engine.detections
    assert final["lang"] == "en" and final["lang_probability"] == 0.9  # the full detection's, not the guess


@pytest.mark.timeout(60)
async def test_a_short_segment_decides_once_on_its_whole_audio(tone_engine) -> None:
    """Shorter than 1.8 s: the interim at 1 s guesses cheaply and the final's piece detects, on the
    segment's whole audio (0.4.0 kept an early detection made on the first second)."""
    engine = CountingDetections(tone_engine)
    frames = await _stream(engine, tone_pcm("打开车门", lead_ms=300, tail_ms=0))
    [final] = of_type(frames, "final")
    assert 1000 < final["timing"]["audio_ms"] < 1800, final
    full = [samples for kind, samples in engine.detections if kind == "full"]
    assert [kind for kind, _ in engine.detections] == ["cheap", "full"], engine.detections
    assert full == [final["timing"]["audio_ms"] * 16]
    assert final["lang"] == "en" and final["lang_probability"] == 0.9


def test_an_interims_guess_sets_neither_the_segment_nor_the_turn() -> None:
    turn = TurnLanguage()
    segment = turn.segment(min_samples=100)
    cheap_calls: list[int] = []

    def cheap(audio: np.ndarray) -> LanguageGuess:
        cheap_calls.append(audio.shape[0])
        return LanguageGuess("zh", 0.6)

    def full(audio: np.ndarray) -> LanguageGuess:
        return LanguageGuess("en", 0.9)

    short = np.zeros(50, dtype=np.int16)
    assert segment.resolve(short, full, cheap).lang == "zh"
    assert segment.resolve(short, full, cheap).lang == "zh" and cheap_calls == [50]  # one guess per segment
    assert turn.guess is None and segment.guess is None  # what the final reports never comes from it
    assert segment.resolve(short, full).lang == "en"  # a kept piece detects
    assert segment.resolve(short, full, cheap).lang == "en"  # and later interims follow it
    assert turn.guess == LanguageGuess("en", 0.9) and cheap_calls == [50]


def test_a_kept_piece_does_not_wait_for_an_interims_guess() -> None:
    """The final's piece and an interim decode on two workers: the final must not queue behind the guess."""
    segment = SegmentLanguage(min_samples=100)
    guessing, release = threading.Event(), threading.Event()

    def slow_cheap(audio: np.ndarray) -> LanguageGuess:
        guessing.set()
        release.wait(5)
        return LanguageGuess("zh", 0.6)

    interim = threading.Thread(target=segment.resolve, args=(np.zeros(50, dtype=np.int16),
                                                            lambda a: LanguageGuess("en", 0.9), slow_cheap))
    interim.start()
    try:
        assert guessing.wait(5)
        started = time.monotonic()
        assert segment.resolve(np.zeros(150, dtype=np.int16), lambda a: LanguageGuess("en", 0.9)).lang == "en"
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        interim.join(5)


class RecordingDetector:
    """Stands in for the Whisper language step: says en, and records whether each call was the cheap guess."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def detect(self, samples: np.ndarray, allowed: Sequence[str], provisional: bool = False) -> LanguageGuess:
        self.calls.append(provisional)
        return LanguageGuess("en", 0.9)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cheap_guess", [True, False])
def test_whisper_guesses_cheaply_for_interims_only_when_configured(whisper_dir: Path, cheap_guess: bool) -> None:
    """``asr.whisper.language_guess_pad_frames: null`` (``cheap_guess`` False): an interim detects in full."""
    detector = RecordingDetector()
    engine = SherpaWhisperEngine(load_whisper_model(whisper_dir), "whisper", detector=lambda: detector,  # type: ignore[arg-type,return-value]
                                 cheap_guess=cheap_guess)
    audio = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")[:16000]
    options = DecodeOptions(language="auto", languages=("zh", "en"), segment_language=TurnLanguage().segment())
    interim = engine.decode_batch([AsrRequest(audio, options, provisional=True)])[0]
    assert interim.lang == "en" and detector.calls == [cheap_guess]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("guess_pad_frames", "cheap"), [(None, False), (50, True)])
def test_the_setting_reaches_the_whisper_engine(whisper_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                               guess_pad_frames: int | None, cheap: bool) -> None:
    """``asr.whisper.language_guess_pad_frames`` as a server builds its engine: null, the default,
    keeps interims' full detection; a number makes them guess with that much padding."""
    calls: list[tuple[bool, int]] = []
    detect = WhisperLanguageDetector.detect

    def recording(self: WhisperLanguageDetector, samples: np.ndarray, allowed: Sequence[str],
                  provisional: bool = False) -> LanguageGuess:
        calls.append((provisional, self._guess_pad_frames))
        return detect(self, samples, allowed, provisional)

    monkeypatch.setattr(WhisperLanguageDetector, "detect", recording)
    config = AppConfig.model_validate({"asr": {"model": str(whisper_dir),
                                               "whisper": {"language_guess_pad_frames": guess_pad_frames}}})
    assert AppConfig().asr.whisper.language_guess_pad_frames is None
    engine = build_engine(config)
    audio = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")[:16000]
    options = DecodeOptions(language="auto", languages=("zh", "en"), segment_language=TurnLanguage().segment())
    engine.decode_batch([AsrRequest(audio, options, provisional=True)])
    assert calls == [(cheap, 300 if guess_pad_frames is None else guess_pad_frames)]


def test_one_allowed_language_is_recorded_with_its_probability_for_interims_and_finals() -> None:
    """With one allowed language nothing is detected, yet the segment records it: a short segment's
    interim (which may guess cheaply) and final both report it with probability 1.0 (a cheap guess
    records nothing, so taking that path lost the final's lang_probability)."""
    def never(_audio: np.ndarray) -> LanguageGuess:
        raise AssertionError("nothing to detect with one allowed language")

    turn = TurnLanguage()
    options = DecodeOptions(language="auto", languages=("en",), segment_language=turn.segment())
    short = np.zeros(16000, dtype=np.int16)  # 1 s: below the decision point
    assert options.detected_language(short, never, cheap=never) == LanguageGuess("en", 1.0)  # the interim
    assert options.detected_language(short, never) == LanguageGuess("en", 1.0)  # the final
    assert options.language_probability() == 1.0 and turn.guess == LanguageGuess("en", 1.0)
