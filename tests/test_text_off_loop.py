"""The text stage's ITN runs in a worker process, never on the event loop (issue 19): the grammars
hold the GIL for the whole call (~0.1 ms a character), so inline, a long final stalled every
session. Ordering still holds: finals of a seat leave in segment order, the commit after them."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo, StageTimer
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.eot import SilenceTimeoutPolicy
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.scheduler import InferenceScheduler
from kitt_stt.text.itn import WetextNormalizer
from kitt_stt.text.language import TextLanguage
from kitt_stt.text.offload import ItnWorker
from kitt_stt.text.stage import TextStage
from tests.helpers import commits, of_type, running, tone_pcm

LONG = "空调调到二十六度" * 20  # 160 characters: tens of milliseconds of grammars
SHORT = "音量调到百分之三十"
SAID = {"打开车门": LONG, "关窗": SHORT}  # what the tone engine hears -> what this "engine" writes


class NumberWords(AsrEngine):
    """The tone engine's decodes written as Mandarin number words, as Whisper writes them (an
    engine without ITN of its own, so the text stage's ITN applies)."""

    info = EngineInfo(name="number-words", kind="whisper", provider="cpu", languages=("zh",), hotwords=False)

    def __init__(self, inner: AsrEngine) -> None:
        self.inner = inner

    def new_feature_stream(self):  # type: ignore[no-untyped-def]
        return self.inner.new_feature_stream()

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        return [AsrResult(text=SAID.get(result.text, result.text), lang="zh")
                for result in self.inner.decode_batch(requests, timer)]


@pytest.fixture(scope="module")
def tone_engine(tone_dir: Path) -> OrtSenseVoiceEngine:
    return OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone", AsrConfig())


async def test_finals_and_commits_are_normalised_off_the_loop_in_order(tone_engine, monkeypatch) -> None:
    inline: list[str] = []
    original = WetextNormalizer.normalize

    def recording(self: WetextNormalizer, text: str, language: TextLanguage) -> str:
        inline.append(text)  # ITN in this process: on the event loop's thread
        return original(self, text, language)

    monkeypatch.setattr(WetextNormalizer, "normalize", recording)
    config = AppConfig.model_validate({"asr": {"chunk_pause_ms": 0}, "vad": {"silence_ms": 300},
                                       "interim": {"enabled": False}, "turn": {"model": None}})
    frames: list[dict[str, Any]] = []
    pcm = tone_pcm("打开车门", tail_ms=500) + tone_pcm("关窗", lead_ms=0, tail_ms=600)  # one turn, two segments
    with running(InferenceScheduler(NumberWords(tone_engine), workers=1)) as scheduler:
        seat = SeatPipeline("driver", config, lambda: SessionSettings(interim=False, language="zh"), scheduler,
                            SilenceTimeoutPolicy(800), lambda frame: frames.append(frame.model_dump()),
                            owner="test")
        try:
            seat.push_audio(np.frombuffer(pcm, dtype="<i2"))
            deadline = time.monotonic() + 30  # the first call spawns the worker and loads its grammars
            while not commits(frames):
                assert time.monotonic() < deadline, frames
                await asyncio.sleep(0.01)
        finally:
            seat.close()
    assert [f["type"] for f in frames if f["type"] != "speech_start"] == ["final", "final", "commit"]
    first, second = of_type(frames, "final")
    assert (first["segment_id"], second["segment_id"]) == (1, 2)  # the long one first, though slower
    assert first["text"] == "空调调到26度" * 20 and second["text"] == "音量调到30%"
    assert commits(frames)[0]["text"] == "空调调到26度" * 20 + "音量调到30%"  # the turn, restaged as one
    assert inline == []  # not one text went through the grammars in this process


async def test_off_loop_final_equals_the_inline_one() -> None:
    stage = TextStage()
    for text, lang in ((LONG, "zh"), ("hey kitt, set the temperature to twenty six degrees", "en"),
                       ("打开车窗", "zh"), ("大開車門調到二十六度", "zh")):
        assert await stage.final_off_loop(text, lang) == stage.final(text, lang)


async def test_a_worker_that_died_is_replaced_for_the_next_text() -> None:
    from concurrent.futures.process import BrokenProcessPool

    worker = ItnWorker()
    try:
        assert await worker.normalize("二十六度", TextLanguage.ZH) == "26度"
        [pid] = list(worker._executor()._processes)  # the one process (private: no public handle to it)
        os.kill(pid, 9)
        await asyncio.sleep(0.2)
        with pytest.raises(BrokenProcessPool):
            await worker.normalize("三十度", TextLanguage.ZH)
        assert await worker.normalize("三十度", TextLanguage.ZH) == "30度"
    finally:
        worker.close()
