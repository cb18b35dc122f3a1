"""The VAD segmenter's state machine on synthetic speech."""

from __future__ import annotations

import numpy as np
import pytest

from kitt_stt.audio.vad import EndReason, SpeechAudio, SpeechEnded, SpeechStarted, VadSegmenter, VadState
from kitt_stt.config.schema import VadConfig
from tests.helpers import silence, tone_pcm

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def run(segmenter: VadSegmenter, pcm: bytes) -> list:
    samples = np.frombuffer(pcm, dtype="<i2")
    events = []
    for offset in range(0, samples.shape[0] - 319, 320):
        events.extend(segmenter.process(samples[offset : offset + 320]))
    return events


def segments(events: list) -> list[tuple[int, int, str, int]]:
    """(start_ms, end_ms, reason, samples) per segment."""
    out, start, samples = [], None, 0
    for event in events:
        if isinstance(event, SpeechStarted):
            start, samples = event.audio_ms, event.preroll.shape[0]
        elif isinstance(event, SpeechAudio):
            samples += event.samples.shape[0]
        elif isinstance(event, SpeechEnded):
            out.append((start, event.end_ms, event.reason.value, samples))
    return out


def test_one_utterance_is_one_segment_with_preroll() -> None:
    segmenter = VadSegmenter(VadConfig(silence_ms=300, preroll_ms=200))
    # speech from 1000 ms (lead) to 1000 + 4*200 + 3*100 = 2100 ms
    samples = np.frombuffer(tone_pcm("打开车门", lead_ms=1000, tail_ms=600), dtype="<i2")
    events, audio_begins_ms = [], None
    for offset in range(0, samples.shape[0] - 319, 320):
        for event in segmenter.process(samples[offset : offset + 320]):
            if isinstance(event, SpeechStarted):
                audio_begins_ms = segmenter.audio_ms - event.preroll.shape[0] // 16
            events.append(event)
    [(start, end, reason, _)] = segments(events)
    assert reason == "silence"
    assert 980 <= start <= 1060
    assert 2080 <= end <= 2300  # webrtcvad's own hangover keeps ~100 ms after the last buzz voiced
    assert audio_begins_ms is not None and audio_begins_ms <= 1000 - 150  # pre-roll reaches before the onset
    assert segmenter.state is VadState.SILENCE


def test_short_pauses_stay_in_one_segment_long_ones_split() -> None:
    segmenter = VadSegmenter(VadConfig(silence_ms=400))
    pcm = tone_pcm("打开", tail_ms=200) + tone_pcm("车门", lead_ms=0, tail_ms=900) + tone_pcm("AB", lead_ms=0)
    assert len(segments(run(segmenter, pcm))) == 2


def test_max_segment_duration_forces_a_split() -> None:
    segmenter = VadSegmenter(VadConfig(silence_ms=500, max_segment_ms=1000))
    pcm = tone_pcm("ABCDEF", burst_ms=300, gap_ms=60, tail_ms=700)
    found = segments(run(segmenter, pcm))
    assert [reason for *_, reason, _ in found][:2] == ["max_duration", "max_duration"]
    assert found[1][0] == found[0][1] and found[2][0] == found[1][1]  # speech continues, nothing lost
    assert all(samples <= 16 * 1000 for *_, samples in found)


def test_client_start_holds_until_client_stop() -> None:
    segmenter = VadSegmenter(VadConfig(silence_ms=300))
    events = segmenter.client_start()
    assert isinstance(events[0], SpeechStarted)
    events += run(segmenter, tone_pcm("打开", tail_ms=1500))
    assert not any(isinstance(e, SpeechEnded) for e in events)
    [end] = segmenter.force_end(EndReason.CLIENT)
    assert end.reason is EndReason.CLIENT
    assert segmenter.force_end(EndReason.CLIENT) == []


def test_silence_and_preroll_memory_are_bounded() -> None:
    segmenter = VadSegmenter(VadConfig(preroll_ms=300))
    assert run(segmenter, silence(5000)) == []
    # the pre-roll ring, plus the detector's fixed state (filter history, noise-floor window: ~6 KB)
    assert segmenter.buffered_bytes <= (300 + 100) * 32 + 8 * 1024
    before = segmenter.buffered_bytes
    run(segmenter, silence(5000))
    assert segmenter.buffered_bytes == before


def test_a_held_segment_stays_held_after_the_forced_split() -> None:
    segmenter = VadSegmenter(VadConfig(silence_ms=300, max_segment_ms=1000))
    events = segmenter.client_start()
    events += run(segmenter, silence(2500))  # held: silence does not end it, only the length does
    found = [(type(e).__name__, getattr(e, "reason", None)) for e in events if not isinstance(e, SpeechAudio)]
    assert found.count(("SpeechEnded", EndReason.MAX_DURATION)) == 2
    assert segmenter.state is VadState.SPEECH and segmenter.client_held
    [end] = segmenter.force_end(EndReason.CLIENT)
    assert end.reason is EndReason.CLIENT


def test_skipped_audio_advances_the_clock_only() -> None:
    segmenter = VadSegmenter(VadConfig())
    run(segmenter, silence(200))
    segmenter.skip(16 * 330)
    assert segmenter.audio_ms == 530
    [start] = [e for e in run(segmenter, tone_pcm("打开", lead_ms=100)) if isinstance(e, SpeechStarted)]
    assert 530 + 100 - 60 <= start.audio_ms <= 530 + 100 + 60  # onset on the client's clock
