"""The speech detectors and the cabin front end: noise alone never holds a segment open, speech
(human and espeak-ng) in road and engine noise still gets its segment, for every engine; the Silero model is
fetched pinned and refused when it does not match."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.audio.frontend import HighPassFilter, NoiseFloor, level_db
from kitt_stt.audio.silero import SileroDetector, load_silero
from kitt_stt.audio.vad import SpeechAudio, SpeechEnded, SpeechStarted, VadSegmenter, VadState
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import VadConfig
from kitt_stt.models import pypi, silero_release
from kitt_stt.models.pypi import FetchError
from tests.conftest import installed
from tests.helpers import tone_pcm
from utils.performance import cabin_noise

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md

SPEECH = Path(__file__).parent / "fixtures" / "speech"
#: a human speaker (CMU Sphinx test data) and two espeak-ng sentences (tests/fixtures/speech/NOTICE)
CLIPS = ["en_go_forward_ten_meters.wav", "en_open_the_car_door_please.wav", "en_turn_on_the_air_conditioning.wav"]


@pytest.fixture(scope="module")
def silero_dir(model_cache: Path) -> Path:
    return installed(model_cache, "silero-vad")


def engines(silero_dir: Path) -> dict[str, VadConfig]:
    """Each engine with its shipped front end."""
    return {"webrtc": VadConfig(engine="webrtc"), "silero": VadConfig(engine="silero", model=str(silero_dir))}


def segments_of(config: VadConfig, samples: np.ndarray) -> tuple[list[tuple[int, int]], VadState]:
    segmenter = VadSegmenter(config)
    found, start = [], None
    for offset in range(0, samples.shape[0] - 319, 320):
        for event in segmenter.process(samples[offset : offset + 320]):
            if isinstance(event, SpeechStarted):
                start = event.audio_ms
            elif isinstance(event, SpeechEnded) and start is not None:
                found.append((start, event.end_ms))
    return found, segmenter.state


def sine(hz: float, seconds: float, dbfs: float = -20.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return 32768.0 * 10 ** (dbfs / 20) * np.sqrt(2) * np.sin(2 * np.pi * hz * t)


def test_high_pass_keeps_speech_band_and_removes_rumble() -> None:
    def gain_db(hz: float) -> float:
        highpass, signal = HighPassFilter(150, 320), sine(hz, 1.0)
        out = np.concatenate([highpass.process(signal[i : i + 320]) for i in range(0, signal.shape[0], 320)])
        return level_db(out[8000:]) - level_db(signal[8000:])  # steady state
    assert gain_db(1000) > -0.5 and gain_db(300) > -1.0
    assert gain_db(50) < -40 and gain_db(30) < -40


def test_noise_floor_follows_a_noise_that_starts_within_its_window() -> None:
    floor = NoiseFloor(window_ms=1000, frame_ms=20)
    levels = [floor.update(-80.0) for _ in range(100)] + [floor.update(-30.0) for _ in range(60)]
    assert levels[99] == -80.0 and levels[-1] == -30.0


@pytest.mark.parametrize("noise", sorted(cabin_noise.SYNTHETIC))
def test_noise_alone_never_holds_a_segment_open(noise: str, silero_dir: Path) -> None:
    rng = np.random.default_rng(7)
    for level in (-30.0, -25.0):
        samples = cabin_noise.to_int16(cabin_noise.at_level(cabin_noise.SYNTHETIC[noise](16000 * 20, rng), level))
        for name, config in engines(silero_dir).items():
            found, state = segments_of(config, samples)
            assert state is VadState.SILENCE and len(found) <= 1, (name, level, found)


def test_without_the_front_end_webrtc_hears_road_noise_as_speech() -> None:
    """The fault the front end fixes (so the test above can fail): webrtcvad alone on brown noise."""
    rng = np.random.default_rng(7)
    samples = cabin_noise.to_int16(cabin_noise.at_level(cabin_noise.brown(16000 * 20, rng), -25.0))
    _, state = segments_of(VadConfig(highpass_hz=0, noise_gate_db=0), samples)
    assert state is VadState.SPEECH


@pytest.mark.parametrize("noise", ["brown", "engine"])
@pytest.mark.parametrize("snr_db", [10, 5])
def test_speech_in_cabin_noise_gets_a_segment_that_ends(noise: str, snr_db: float, silero_dir: Path) -> None:
    for clip in CLIPS:
        speech = read_wav_16k_mono(SPEECH / clip)
        padded = np.concatenate([np.zeros(16000, np.int16), speech, np.zeros(32000, np.int16)])
        unit_noise = cabin_noise.SYNTHETIC[noise](padded.shape[0], np.random.default_rng(3))
        noisy = cabin_noise.mix(padded, unit_noise, snr_db)
        speech_end_ms = 1000 + _last_loud_ms(speech)
        for name, config in engines(silero_dir).items():
            found, state = segments_of(config, noisy)
            assert state is VadState.SILENCE, (clip, name)
            assert found, (clip, name, "missed")
            assert found[0][0] <= speech_end_ms and found[-1][1] >= speech_end_ms - 300, (clip, name, found)
            assert found[-1][1] <= speech_end_ms + 400, (clip, name, found)


def _last_loud_ms(speech: np.ndarray) -> int:
    loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 0.05 * np.abs(speech.astype(np.int32)).max())
    return int(loud[-1]) // 16


def test_silero_state_is_per_seat_bounded_and_released(silero_dir: Path) -> None:
    config = VadConfig(engine="silero", model=str(silero_dir))
    assert load_silero(silero_dir) is load_silero(silero_dir)  # one session for every seat
    seat = SileroDetector(config, load_silero(silero_dir))
    speech = read_wav_16k_mono(SPEECH / CLIPS[0])
    decisions = [seat.is_speech(speech[i : i + 320]) for i in range(0, speech.shape[0] - 319, 320)]
    assert any(decisions)
    assert seat.nbytes < 12 * 1024  # filter history, one window of samples, the recurrent state: fixed
    for _ in range(500):  # 10 s more: nothing accumulates
        seat.is_speech(np.zeros(320, np.int16))
    assert seat.nbytes < 12 * 1024
    seat.reset()
    assert not seat.is_speech(np.zeros(320, np.int16))


def test_silero_wheel_that_does_not_match_its_pin_installs_nothing(tmp_path: Path, monkeypatch) -> None:
    wheel = tmp_path / "silero_vad-6.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(silero_release.MEMBER, b"not the model")
        archive.writestr(silero_release.LICENSE_MEMBER, b"MIT")
    monkeypatch.setattr(pypi, "pip_download", lambda requirement, dest: wheel)
    out = tmp_path / "out"
    with pytest.raises(FetchError, match="sha256"):
        silero_release.fetch_silero_vad(out)
    assert not (out / "silero_vad.onnx").exists()


def test_a_client_held_segment_ignores_the_engine(silero_dir: Path) -> None:
    """Clients that bring their own VAD (`vad start`/`vad stop`) work the same on every engine."""
    for name, config in engines(silero_dir).items():
        segmenter = VadSegmenter(config)
        events = segmenter.client_start()
        noise = cabin_noise.at_level(cabin_noise.brown(16000 * 3, np.random.default_rng(1)), -30.0)
        samples = cabin_noise.to_int16(noise)
        for offset in range(0, samples.shape[0] - 319, 320):
            events += segmenter.process(samples[offset : offset + 320])
        assert isinstance(events[0], SpeechStarted) and not any(isinstance(e, SpeechEnded) for e in events), name
        assert segmenter.state is VadState.SPEECH and segmenter.client_held, name


def test_a_pause_cut_lands_in_the_pause_not_in_the_next_word() -> None:
    """The front end's filter makes every decision about the frame before (``decision_lag_samples``);
    a chunk cut where the decision was made landed 20 ms inside the next burst, so that burst was
    decoded twice (final ``ABCDEF F`` for ``ABCDEF``)."""
    from kitt_stt.pipeline.chunks import ChunkTracker

    segmenter = VadSegmenter(VadConfig(engine="webrtc"))
    chunks = ChunkTracker(pause_frames=5, max_chunk_samples=1 << 30, lag_samples=segmenter.decision_lag_samples)
    samples = np.frombuffer(tone_pcm("ABCDEF", lead_ms=600, tail_ms=600), dtype="<i2")
    audio = np.zeros(0, np.int16)
    cuts = []
    for offset in range(0, samples.shape[0] - 319, 320):
        for event in segmenter.process(samples[offset : offset + 320]):
            if isinstance(event, SpeechStarted):
                audio = event.preroll
            elif isinstance(event, SpeechAudio):
                audio = np.concatenate([audio, event.samples])
                cut = chunks.boundary_after(event.voiced, audio)
                if cut is not None:
                    cuts.append(cut.position)
                    chunks.cut(cut.position, None)
    assert cuts, "the 100 ms gaps between bursts close chunks"
    for position in cuts:
        assert np.abs(audio[position - 320 : position].astype(np.int32)).max() == 0, position  # ends in the gap


def test_a_release_that_would_never_end_speech_is_refused() -> None:
    with pytest.raises(ValueError, match="speech never stops"):
        VadConfig(engine="silero", threshold=0.3, release=0.3)
    assert VadConfig(threshold=0.3, release=0.25).release == 0.25
