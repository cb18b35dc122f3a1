"""Silero batched off the loop (kitt_stt/audio/silero_batch.py): every seat gets the events that
scoring it alone on the loop gives, in order with what its client says; a provider the session
does not run on is refused at start-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from pydantic import ValidationError

from kitt_stt.asr.sense_voice_model import ModelError
from kitt_stt.audio.silero_batch import SileroBatcher, build_vad_batch
from kitt_stt.audio.vad import FRAME_SAMPLES, SpeechAudio, SpeechEnded, SpeechStarted, VadEvent, VadSegmenter
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig, VadConfig
from kitt_stt.models.vad_model import prepare_vad
from kitt_stt.pipeline.vad_feed import VadFeed
from tests.conftest import installed
from utils.performance import cabin_noise

SPEECH = Path(__file__).parent / "fixtures" / "speech"


@pytest.fixture(scope="module")
def silero_dir(model_cache: Path) -> Path:
    return installed(model_cache, "silero-vad")


def recordings() -> list[np.ndarray]:
    """Each of the project's recordings in 2 s of silence, in quiet and in brown (road-like) noise: 10 seats."""
    rng = np.random.default_rng(3)
    seats = []
    for path in sorted(SPEECH.glob("*.wav")):
        speech = read_wav_16k_mono(path).astype(np.float64)
        padded = np.concatenate([np.zeros(32000), speech, np.zeros(32000)])
        noise = cabin_noise.at_level(cabin_noise.SYNTHETIC["brown"](padded.shape[0], rng), -30.0)
        seats += [cabin_noise.to_int16(padded), cabin_noise.to_int16(padded + noise)]
    return seats


def summary(events: list[VadEvent]) -> list[tuple[object, ...]]:
    """What a seat acts on: where segments start and end, and which audio they hold."""
    out: list[tuple[object, ...]] = []
    for event in events:
        if isinstance(event, SpeechStarted):
            out.append(("start", event.audio_ms, event.preroll.shape[0], event.continued))
        elif isinstance(event, SpeechAudio):
            out.append(("audio", event.samples.shape[0], event.voiced))
        elif isinstance(event, SpeechEnded):
            out.append(("end", event.end_ms, event.reason.value))
    return out


def on_the_loop(config: VadConfig, samples: np.ndarray) -> list[tuple[object, ...]]:
    segmenter, events = VadSegmenter(config), []
    for offset in range(0, samples.shape[0] - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        events += segmenter.process(samples[offset : offset + FRAME_SAMPLES])
    return summary(events)


async def batched(config: VadConfig, seats: list[np.ndarray]) -> tuple[list[list[tuple[object, ...]]], float]:
    """All seats streamed together, frame by frame, through one batch thread; (events, mean batch)."""
    batcher = build_vad_batch(config)
    assert batcher is not None
    batcher.start()
    try:
        events: list[list[VadEvent]] = [[] for _ in seats]
        feeds = [VadFeed(config, lambda _, found, seat=seat: events[seat].extend(found), batcher)
                 for seat in range(len(seats))]
        frames = max(samples.shape[0] for samples in seats) // FRAME_SAMPLES
        for index in range(frames):
            for feed, samples in zip(feeds, seats, strict=True):
                if (index + 1) * FRAME_SAMPLES <= samples.shape[0]:
                    feed.frame(samples[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES])
            if index % 8 == 0:
                await asyncio.sleep(0)  # let decisions in, as the loop does between socket reads
        done = [asyncio.get_running_loop().create_future() for _ in feeds]
        for feed, future in zip(feeds, done, strict=True):
            feed.after(lambda future=future: future.set_result(None))
        await asyncio.wait_for(asyncio.gather(*done), 30)
        return [summary(found) for found in events], batcher.rows / max(1, batcher.runs)
    finally:
        batcher.stop(2.0)


def test_batched_silero_gives_every_seat_the_events_of_its_own_unbatched_run(silero_dir: Path) -> None:
    config = VadConfig(engine="silero", model=str(silero_dir), batch=8, batch_wait_ms=5.0)  # room to gather seats
    seats = recordings()
    expected = [on_the_loop(config, samples) for samples in seats]
    got, mean_batch = asyncio.run(batched(config, seats))
    assert mean_batch > 1.5  # seats really were scored together
    for seat, (mine, alone) in enumerate(zip(got, expected, strict=True)):
        assert any(item[0] == "start" for item in alone), seat  # every recording holds speech
        assert mine == alone, seat


@contextlib.contextmanager
def batch_thread(config: VadConfig) -> Iterator[SileroBatcher]:
    """A started batch thread for ``config``, stopped after the block."""
    batcher = build_vad_batch(config)
    assert batcher is not None
    batcher.start()
    try:
        yield batcher
    finally:
        batcher.stop(2.0)


async def drained(feed: VadFeed) -> None:
    """Until every frame handed to ``feed`` has had its events."""
    finished = asyncio.get_running_loop().create_future()
    feed.after(lambda: finished.set_result(None))
    await asyncio.wait_for(finished, 10)


def test_a_fault_on_one_frame_costs_that_frame_alone(silero_dir: Path) -> None:
    """A seat whose handling of one batched frame raises still gets every later frame with its own
    decision, in order (the rest of that batch stayed queued, and every later decision was paired
    with the wrong frame), and the calls after the frames still run."""
    config = VadConfig(engine="silero", model=str(silero_dir), batch=4, batch_wait_ms=0.0)
    speech = recordings()[0]

    async def run() -> list[int]:
        seen: list[int] = []

        def on_frame(frame: np.ndarray, _events: list[VadEvent]) -> None:
            index = int(frame[0])  # each frame carries its index in its first sample
            seen.append(index)
            if index == 3:
                raise RuntimeError("a fault in one frame's handling")

        with batch_thread(config) as batcher:
            feed = VadFeed(config, on_frame, batcher)
            for index in range(12):
                frame = speech[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES].copy()
                frame[0] = index
                feed.frame(frame)
            await drained(feed)
        return seen

    assert asyncio.run(run()) == list(range(12))


def test_client_calls_wait_for_the_frames_sent_before_them(silero_dir: Path) -> None:
    config = VadConfig(engine="silero", model=str(silero_dir), batch=4, batch_wait_ms=0.0)
    speech = recordings()[0]

    async def run() -> list[str]:
        order: list[str] = []
        mark: Callable[[str], Callable[[], None]] = lambda name: lambda: order.append(name)  # noqa: E731
        with batch_thread(config) as batcher:
            feed = VadFeed(config, lambda *_: order.append("frame"), batcher)
            for index in range(12):
                feed.frame(speech[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES])
                if index in (2, 7):
                    feed.after(mark(f"call after {index + 1}"))
            await drained(feed)
        return order

    order = asyncio.run(run())
    assert order == ["frame"] * 3 + ["call after 3"] + ["frame"] * 5 + ["call after 8"] + ["frame"] * 4


def test_a_provider_the_vad_session_does_not_run_on_is_refused(silero_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = AppConfig(vad=VadConfig(engine="silero", model=str(silero_dir), provider="cuda"))
    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: [p for p in real if p != "CUDAExecutionProvider"])
    with pytest.raises(ModelError, match=r"vad.provider=cuda: this onnxruntime build has no CUDAExecutionProvider"):
        prepare_vad(config)
    if "CUDAExecutionProvider" not in real:  # onnxruntime falls back to the CPU when asked for CUDA it lacks
        monkeypatch.setattr(ort, "get_available_providers", lambda: [*real, "CUDAExecutionProvider"])
        with pytest.raises(ModelError, match=r"vad.provider=cuda: the session runs on CPUExecutionProvider"):
            prepare_vad(config)
    with pytest.raises(ValidationError, match="tensorrt is not supported"):
        VadConfig(provider="tensorrt")
