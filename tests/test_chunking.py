"""Pause-chunked decoding: same text as whole-segment decoding; a pause closes the chunk at once, so
the final of a segment that ends in silence decodes nothing more; long speech is cut at a quiet point."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.eot import SilenceTimeoutPolicy
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.scheduler import InferenceScheduler, Priority
from tests.helpers import running, stream_through_seat, tone_pcm


class SpyEngine(AsrEngine):
    """The real tone engine, recording how many samples each decode was given."""

    def __init__(self, inner: OrtSenseVoiceEngine) -> None:
        self.inner = inner
        self.info = inner.info
        self.lengths: list[int] = []

    def new_feature_stream(self):
        return self.inner.new_feature_stream()

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        self.lengths += [request.samples.shape[0] for request in requests]
        return self.inner.decode_batch(requests, timer)


@pytest.fixture(scope="module")
def tone_engine(tone_dir: Path) -> OrtSenseVoiceEngine:
    return OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone", AsrConfig())


class AtDecodeCap:
    """Admission of a connection at its decode cap: segments open, optional work is refused."""

    def open_segment(self, seat: str) -> None:
        return None

    def optional_decode(self) -> bool:
        return False


async def run_seat(engine: AsrEngine, pcm: bytes, admission: object = None, client_stop: bool = False,
                   **asr: object) -> list[dict]:
    """Push ``pcm`` through one seat (then a client ``vad stop`` if asked); frames until its commit."""
    config = AppConfig.model_validate({"asr": asr, "vad": {"silence_ms": 500}, "interim": {"enabled": False}})
    return await stream_through_seat(engine, config, SessionSettings(interim=False), pcm, admission=admission,
                                     client_stop=client_stop)


# 400 ms pauses: webrtcvad marks ~280 ms of them unvoiced (its own hangover), longer than
# chunk_pause_ms (200) and shorter than vad.silence_ms (500), so the segment goes on in chunks
PAUSED = "打开车门", "ABC", "关窗", "DEF", "门门"


def paused_speech() -> bytes:
    pcm = b"".join(tone_pcm(text, lead_ms=300 if index == 0 else 0, tail_ms=400) for index, text in enumerate(PAUSED))
    return pcm + bytes(32 * 600)


async def test_chunked_text_equals_whole_segment_text(tone_engine) -> None:
    chunked = await run_seat(SpyEngine(tone_engine), paused_speech(), chunk_pause_ms=200)
    whole = await run_seat(SpyEngine(tone_engine), paused_speech(), chunk_pause_ms=0)
    [chunked_final] = [f for f in chunked if f["type"] == "final"]
    [whole_final] = [f for f in whole if f["type"] == "final"]
    assert chunked_final["text"] == whole_final["text"] == "".join(PAUSED)
    assert chunked_final["timing"]["chunks"] == len(PAUSED)
    assert whole_final["timing"]["chunks"] == 1


async def test_a_final_after_a_pause_decodes_nothing_more(tone_engine) -> None:
    spy = SpyEngine(tone_engine)
    frames = await run_seat(spy, paused_speech(), chunk_pause_ms=200)
    [final] = [f for f in frames if f["type"] == "final"]
    segment_samples = final["timing"]["audio_ms"] * 16
    # the pause before the segment's end closed the last chunk: one decode per phrase, none for the
    # final, whose text is the chunks' text
    assert len(spy.lengths) == len(PAUSED) and final["timing"]["tail_audio_ms"] == 0
    assert final["timing"]["decode_ms"] == 0 and final["timing"]["chunks"] == len(PAUSED)
    assert final["text"] == "".join(PAUSED)
    # no sample was decoded twice; what was never decoded is the silence after the last cut
    assert sum(spy.lengths) < segment_samples <= sum(spy.lengths) + 500 * 16


async def test_a_segment_cut_during_speech_decodes_its_tail(tone_engine) -> None:
    """A client ``vad stop`` (or any end) while speech is going on: the tail holds speech and is decoded."""
    spy = SpyEngine(tone_engine)
    pcm = tone_pcm("打开车门", tail_ms=400) + tone_pcm("ABC", lead_ms=0, tail_ms=0)
    frames = await run_seat(spy, pcm, client_stop=True, chunk_pause_ms=200)
    [final] = [f for f in frames if f["type"] == "final"]
    assert final["text"] == "打开车门ABC" and final["timing"]["chunks"] == 2
    assert final["timing"]["tail_audio_ms"] > 0 and len(spy.lengths) == 2


async def test_long_speech_without_pauses_is_cut_at_a_quiet_point(tone_engine) -> None:
    # gaps too short to chunk; Han tokens, so the chunks join without spaces as the whole text does
    pcm = tone_pcm("打开关车门窗打开关车门窗", burst_ms=300, gap_ms=80, tail_ms=700)
    spy = SpyEngine(tone_engine)
    frames = await run_seat(spy, pcm, chunk_pause_ms=200, max_chunk_ms=1000)
    whole = await run_seat(SpyEngine(tone_engine), pcm, chunk_pause_ms=0)
    [final] = [f for f in frames if f["type"] == "final"]
    assert final["timing"]["chunks"] >= 4 and max(spy.lengths) <= 1000 * 16
    # every cut fell in a gap between bursts, never inside one: the text is the whole-segment text
    [whole_final] = [f for f in whole if f["type"] == "final"]
    assert final["text"] == whole_final["text"] == "打开关车门窗打开关车门窗"


async def test_at_a_decode_cap_pause_chunks_are_skipped_but_long_ones_still_cut(tone_engine) -> None:
    spy = SpyEngine(tone_engine)
    frames = await run_seat(spy, paused_speech(), AtDecodeCap(), chunk_pause_ms=200, max_chunk_ms=10_000)
    [final] = [f for f in frames if f["type"] == "final"]
    assert final["text"] == "".join(PAUSED) and final["timing"]["chunks"] == 1 and len(spy.lengths) == 1
    spy = SpyEngine(tone_engine)
    pcm = tone_pcm("ABCDEFABCDEF", burst_ms=300, gap_ms=80, tail_ms=700)
    frames = await run_seat(spy, pcm, AtDecodeCap(), chunk_pause_ms=200, max_chunk_ms=1000)
    [final] = [f for f in frames if f["type"] == "final"]
    assert final["timing"]["chunks"] >= 4 and max(spy.lengths) <= 1000 * 16


def test_chunk_pause_must_be_shorter_than_segment_silence() -> None:
    with pytest.raises(ValueError, match="chunk_pause_ms"):
        AppConfig.model_validate({"asr": {"chunk_pause_ms": 500}, "vad": {"silence_ms": 500}})
    AppConfig.model_validate({"asr": {"chunk_pause_ms": 0}, "vad": {"silence_ms": 500}})
    # under one 20 ms frame it would silently turn chunking (and the max_chunk_ms bound) off
    with pytest.raises(ValueError, match="at least 20"):
        AppConfig.model_validate({"asr": {"chunk_pause_ms": 10}})


async def test_stale_interims_are_skipped_under_load() -> None:
    from tests.test_scheduler import GatedEngine, block_worker, request

    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, interim_budget_ms=50)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        stale = scheduler.submit(request("late"), Priority.INTERIM, owner="c", coalesce_key="k")
        final = scheduler.submit(request("final"), Priority.FINAL, owner="c")
        await asyncio.sleep(0.1)  # the interim waits past its 50 ms budget
        engine.gate.set()
        assert await stale is None
        assert (await final).result.text == "final"
        await blocker
        assert ["late"] not in engine.batches and scheduler.skipped_interims == 1


async def test_naive_mode_is_one_fifo_queue() -> None:
    from tests.test_scheduler import GatedEngine, block_worker, request

    engine = GatedEngine()
    with running(InferenceScheduler(engine, workers=1, fifo=True)) as scheduler:
        blocker = await block_worker(scheduler, engine)
        interims = [scheduler.submit(request(f"i{n}"), Priority.INTERIM, owner="c", coalesce_key="same")
                    for n in range(3)]
        final = scheduler.submit(request("final"), Priority.FINAL, owner="c")
        engine.gate.set()
        await asyncio.gather(blocker, final, *interims)
        assert engine.batches[1:] == [["i0"], ["i1"], ["i2"], ["final"]]  # no priority, no coalescing


async def test_closing_seats_cancel_their_queued_turn_predictions(tone_engine) -> None:
    """Regression (found by the soak): predictions of closed sessions kept queueing behind a
    slow end-of-turn model, each holding up to 8 s of audio, so memory grew without bound."""
    import threading

    from kitt_stt.turnsense.model import TurnPrediction
    from kitt_stt.turnsense.runner import TurnModelRunner

    class SlowModel:
        calls = 0
        gate = threading.Event()
        entered = threading.Event()

        def predict(self, samples: np.ndarray) -> TurnPrediction:
            SlowModel.calls += 1
            SlowModel.entered.set()
            SlowModel.gate.wait(5)
            return TurnPrediction(0.5, 1.0, 1.0)

    runner = TurnModelRunner(SlowModel())  # type: ignore[arg-type]
    config = AppConfig.model_validate({"vad": {"silence_ms": 500}, "interim": {"enabled": False}})
    scheduler = InferenceScheduler(tone_engine, workers=1)
    scheduler.start()
    pcm = np.frombuffer(tone_pcm("AB", tail_ms=700), dtype="<i2")
    try:
        for index in range(5):
            seat = SeatPipeline(f"s{index}", config, lambda: SessionSettings(interim=False), scheduler,
                                SilenceTimeoutPolicy(50), lambda frame: None, owner=index, turn_model=runner)
            seat.push_audio(pcm)  # the segment ends: one prediction submitted
            if index == 0:  # the model is now busy with the first one; the rest queue behind it
                assert await asyncio.to_thread(SlowModel.entered.wait, 5)
            seat.close()
        await asyncio.sleep(0.05)  # cancelling an executor future reaches the executor on the next loop turn
        SlowModel.gate.set()
        await asyncio.sleep(0.3)
        assert SlowModel.calls == 1  # only the one already running; the other four were cancelled
    finally:
        SlowModel.gate.set()
        runner.close()
        scheduler.stop()
