"""LiveKit Agents (real ``livekit-agents`` from the ``livekit`` extra): ``STT.stream()`` against a real server.

Audio is pushed as ``rtc.AudioFrame``s the way an agent session pushes them (48 kHz stereo here,
so the framework's resampler and our down-mix are on the path), and the speech events must come
out in the order ``turn_detection="stt"`` relies on: one ``START_OF_SPEECH`` per turn, interims,
``PREFLIGHT_TRANSCRIPT`` for the server's ``turn_eager``, then ``FINAL_TRANSCRIPT`` and
``END_OF_SPEECH`` at its commit. Reconnect: the server is killed mid-utterance and restarted on
the same port; the stream replays the turn's audio and the utterance is committed whole, once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("livekit.agents", reason="the livekit extra is not installed (pip install 'kitt-stt[livekit]')")

from livekit import rtc
from livekit.agents import Agent, AgentSession
from livekit.agents import stt as lk_stt
from livekit.agents.voice.io import AudioInput

from kitt_stt.integrations.livekit import STT
from tests.helpers import cough_pcm, free_port, run_server, silence, tone_pcm

Kind = lk_stt.SpeechEventType


def frames_48k_stereo(pcm16k: bytes, chunk_ms: int = 10) -> list[rtc.AudioFrame]:
    """16 kHz mono PCM as 48 kHz stereo frames (sample-and-hold up, both channels equal)."""
    mono = np.frombuffer(pcm16k, dtype="<i2")
    upsampled = np.repeat(mono, 3)
    stereo = np.stack([upsampled, upsampled], axis=1).reshape(-1)
    per_chunk = 48 * chunk_ms
    frames = []
    for start in range(0, upsampled.shape[0], per_chunk):
        piece = stereo[start * 2:(start + per_chunk) * 2]
        frames.append(rtc.AudioFrame(piece.tobytes(), 48000, 2, piece.shape[0] // 2))
    return frames


def frames_16k(pcm: bytes, chunk_ms: int = 10) -> list[rtc.AudioFrame]:
    size = 32 * chunk_ms
    return [rtc.AudioFrame(pcm[i:i + size], 16000, 1, len(pcm[i:i + size]) // 2) for i in range(0, len(pcm), size)]


async def stream_events(model: STT, frames: list[rtc.AudioFrame], until, pace: float = 0.2,
                        during=None) -> list[lk_stt.SpeechEvent]:
    """Push ``frames`` paced at ``pace`` x real time, then silence until ``until(events)``; end input."""
    stream = model.stream()
    events: list[lk_stt.SpeechEvent] = []

    async def read() -> None:
        async for event in stream:
            events.append(event)

    reader = asyncio.create_task(read())
    started = time.monotonic()
    for index, frame in enumerate(frames):
        stream.push_frame(frame)
        if during is not None:
            await during(index)
        delay = started + (index + 1) * 0.01 * pace - time.monotonic()
        await asyncio.sleep(max(0.0, delay))
    for _ in range(300):
        if until(events):
            break
        stream.push_frame(frames_16k(silence(100))[0] if frames[0].sample_rate == 16000
                          else frames_48k_stereo(silence(10))[0])
        await asyncio.sleep(0.05)
    stream.end_input()
    await asyncio.wait_for(reader, 20)
    await stream.aclose()
    return events


def kinds(events: list[lk_stt.SpeechEvent]) -> list[str]:
    """Event types in order, runs of interims collapsed (how many depends on timing)."""
    out: list[str] = []
    for event in events:
        if event.type is Kind.RECOGNITION_USAGE:
            continue
        name = event.type.name
        if not (out and out[-1] == name == "INTERIM_TRANSCRIPT"):
            out.append(name)
    return out


def finals(events: list[lk_stt.SpeechEvent]) -> list[str]:
    return [event.alternatives[0].text for event in events if event.type is Kind.FINAL_TRANSCRIPT]


@pytest.mark.py310  # the smoke path on Python 3.10: see docs/testing.md
async def test_stream_yields_the_turn_event_sequence(server) -> None:
    events = await stream_events(STT(server.url, language="zh", words=False),
                                 frames_48k_stereo(tone_pcm("打开车门", tail_ms=1200)), lambda evs: finals(evs))
    assert finals(events) == ["打开车门"]
    assert kinds(events) == ["START_OF_SPEECH", "INTERIM_TRANSCRIPT", "FINAL_TRANSCRIPT", "END_OF_SPEECH"]
    final = next(event for event in events if event.type is Kind.FINAL_TRANSCRIPT).alternatives[0]
    assert final.language == "zh" and 0 < final.start_time < final.end_time
    assert final.metadata["commit"]["metadata"]["eot"]["decision"]["reason"] == "timeout"
    assert final.confidence == 0.0  # not asked for: LiveKit's "not known", never an invented 1


async def test_a_session_asking_for_words_gets_the_commits_confidence(server) -> None:
    events = await stream_events(STT(server.url, language="zh", start_options={"words": True}),
                                 frames_16k(tone_pcm("打开车门", tail_ms=1200)), lambda evs: finals(evs))
    final = next(event for event in events if event.type is Kind.FINAL_TRANSCRIPT).alternatives[0]
    assert final.text == "打开车门" and final.confidence == final.metadata["commit"]["confidence"] > 0.99


async def test_eager_preflight_and_resumed_map_onto_livekit_events(tmp_path: Path, model_cache: Path,
                                                                   turnsense_dir: Path) -> None:
    overrides = {"turn": {"model": "turnsense", "policy": "turnsense", "threshold": 1.0, "eager_threshold": 0.0,
                          "wait_ms": 1500}}
    with run_server(tmp_path, model_cache, overrides) as eager_server:
        pcm = tone_pcm("打开", tail_ms=900) + tone_pcm("车门", lead_ms=0, tail_ms=400) + silence(2000)
        events = await stream_events(STT(eager_server.url), frames_16k(pcm), lambda evs: finals(evs), pace=1.0)
    preflights = [event.alternatives[0].text for event in events if event.type is Kind.PREFLIGHT_TRANSCRIPT]
    assert preflights == ["打开", "打开车门"]
    assert finals(events) == ["打开车门"]
    sequence = kinds(events)
    assert sequence[0] == "START_OF_SPEECH" and sequence.count("START_OF_SPEECH") == 1  # one turn
    assert sequence[-2:] == ["FINAL_TRANSCRIPT", "END_OF_SPEECH"]
    # the resumed turn: an interim follows the first preflight, before the second
    first, second = (index for index, name in enumerate(sequence) if name == "PREFLIGHT_TRANSCRIPT")
    assert "INTERIM_TRANSCRIPT" in sequence[first + 1:second]


async def test_two_turns_and_the_offline_recognize(server) -> None:
    # the server's turn wait runs on the wall clock: the pause must last there too (1 s at this pace)
    pcm = tone_pcm("打开车门", tail_ms=2000) + tone_pcm("关车窗", tail_ms=1200)
    events = await stream_events(STT(server.url, seat="passenger"), frames_16k(pcm), lambda evs: len(finals(evs)) >= 2,
                                 pace=0.5)
    assert finals(events) == ["打开车门", "关车窗"]
    assert [name for name in kinds(events) if name != "INTERIM_TRANSCRIPT"] == \
        ["START_OF_SPEECH", "FINAL_TRANSCRIPT", "END_OF_SPEECH"] * 2
    result = await STT(server.url).recognize(frames_48k_stereo(tone_pcm("关车门")))
    assert result.type is Kind.FINAL_TRANSCRIPT and result.alternatives[0].text == "关车门"


async def test_a_filtered_turn_ends_without_a_final(server) -> None:
    """``wake.mode: required``: speech not addressed to the assistant ends its turn with no transcript."""
    model = STT(server.url, start_options={"wake": {"phrases": ["ABC"], "mode": "required"}})
    pcm = tone_pcm("打开车门", tail_ms=2000) + tone_pcm("ABC关窗", tail_ms=1200)
    events = await stream_events(model, frames_16k(pcm), lambda evs: bool(finals(evs)), pace=0.5)
    assert finals(events) == ["关窗"]
    assert [name for name in kinds(events) if name != "INTERIM_TRANSCRIPT"] == \
        ["START_OF_SPEECH", "END_OF_SPEECH", "START_OF_SPEECH", "FINAL_TRANSCRIPT", "END_OF_SPEECH"]


async def test_server_errors_are_emitted_as_stt_errors(server) -> None:
    model = STT(server.url, language="xx")
    errors: list = []
    model.on("error", errors.append)
    await stream_events(model, frames_16k(silence(200)), lambda _: bool(errors))
    assert errors and "bad_field" in str(errors[0].error) and errors[0].recoverable is False
    hotword_errors: list = []
    ambiguous = STT(server.url, hotwords=["12:30"])  # the protocol refuses an ambiguous colon: hotwords reach it
    ambiguous.on("error", hotword_errors.append)
    await stream_events(ambiguous, frames_16k(silence(200)), lambda _: bool(hotword_errors))
    assert hotword_errors and "hotword" in str(hotword_errors[0].error)


async def test_keepalive_holds_a_quiet_session_open(tmp_path: Path, model_cache: Path) -> None:
    # a server that ends quiet sessions after 1 s, and wants its token
    with run_server(tmp_path, model_cache, {"server": {"idle_timeout_s": 1.0, "auth_token": "k1"}}) as strict:
        model = STT(strict.url, keepalive_s=0.3, token="k1")
        errors: list = []
        model.on("error", errors.append)
        stream = model.stream()
        await asyncio.sleep(3.0)  # no audio at all: only pings go out
        for frame in frames_16k(tone_pcm("打开车门", tail_ms=1200)):
            stream.push_frame(frame)
        events: list[lk_stt.SpeechEvent] = []
        deadline = time.monotonic() + 20
        while not finals(events) and time.monotonic() < deadline:
            events.append(await asyncio.wait_for(stream.__anext__(), 20))
        await stream.aclose()
    assert finals(events) == ["打开车门"] and not errors
    assert stream.reconnects == 0  # the session was never ended by the idle timeout


async def test_reconnect_after_a_server_restart_replays_the_turn(tmp_path: Path, model_cache: Path) -> None:
    port = free_port()
    holder: dict = {}
    with run_server(tmp_path, model_cache, port=port) as first:
        model = STT(first.url)  # the default backoff: 6 attempts, waits capped at 8 s

        async def restart_mid_utterance(index: int) -> None:
            if index == 80 and "second" not in holder:  # 0.8 s in: in the middle of 打开车门
                first.process.kill()  # no drain, no commit: the turn exists only in the client's buffer
                first.process.wait(10)
                (tmp_path / "again").mkdir()
                context = run_server(tmp_path / "again", model_cache, port=port)
                holder["second"] = context
                await asyncio.to_thread(context.__enter__)

        try:
            events = await stream_events(model, frames_16k(tone_pcm("打开车门", tail_ms=1200)),
                                         lambda evs: finals(evs), during=restart_mid_utterance)
        finally:
            if "second" in holder:
                holder["second"].__exit__(None, None, None)
    assert finals(events) == ["打开车门"]
    assert kinds(events).count("START_OF_SPEECH") == 1


class PcmInput(AudioInput):
    """An agent session's microphone: ``pcm`` in real time as 10 ms frames, then silence."""

    def __init__(self, pcm: bytes) -> None:
        super().__init__(label="pcm")
        self._frames = [pcm[i:i + 320] for i in range(0, len(pcm), 320)]
        self._index = 0
        self._started: float | None = None

    async def __anext__(self) -> rtc.AudioFrame:
        self._started = self._started or time.monotonic()
        await asyncio.sleep(max(0.0, self._started + self._index * 0.01 - time.monotonic()))
        data = self._frames[self._index] if self._index < len(self._frames) else bytes(320)
        self._index += 1
        return rtc.AudioFrame(data, 16000, 1, 160)


async def test_a_cough_leaves_the_agent_session_listening_and_the_next_turn_starts(server) -> None:
    """A 200 ms cough opens a turn with nothing to commit. In livekit-agents' own AgentSession
    (``turn_detection="stt"``) the user must go back to "listening" (END_OF_SPEECH: the
    user-silence event an interruptible reply waits on is set again, so the agent may speak), and
    the real turn after it must start anew ("speaking") and be transcribed."""
    session = AgentSession(stt=STT(server.url), turn_detection="stt")
    seen: list[str] = []
    session.on("user_state_changed", lambda ev: seen.append(ev.new_state))
    session.on("user_input_transcribed", lambda ev: seen.append(f"final:{ev.transcript}") if ev.is_final else None)
    session.input.audio = PcmInput(cough_pcm() + tone_pcm("打开车门", lead_ms=0, tail_ms=1500))
    await session.start(agent=Agent(instructions="You are the car's assistant."), record=False)
    try:
        deadline = time.monotonic() + 15
        while not ("final:打开车门" in seen and seen[-1] == "listening") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await session.aclose()
    assert seen == ["speaking", "listening", "speaking", "final:打开车门", "listening"], seen


async def test_push_to_talk_commit_user_turn_commits_at_once(tmp_path: Path, model_cache: Path) -> None:
    """``manual_flush``: livekit-agents' ``commit_user_turn()`` (push-to-talk) flushes the stream
    only when the STT declares it; the flush is our ``finalize``, so the transcript comes at once,
    not after the server's own end-of-turn wait (20 s here: only the flush can commit in time,
    and without it LiveKit gives up after its 2 s transcript timeout)."""
    with run_server(tmp_path, model_cache, {"turn": {"wait_ms": 20_000}}) as slow:
        session = AgentSession(stt=STT(slow.url), turn_detection="manual")
        heard: list[str] = []
        session.on("user_input_transcribed", lambda ev: heard.append(ev.transcript))
        session.input.audio = PcmInput(tone_pcm("打开车门", tail_ms=400))
        await session.start(agent=Agent(instructions="You are the car's assistant."), record=False)
        try:
            deadline = time.monotonic() + 10
            while heard[-1:] != ["打开车门"] and time.monotonic() < deadline:  # the interims: the speech is in
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # its segment has ended: only the turn is open on the server
            pressed = time.monotonic()
            transcript = await asyncio.wait_for(session.commit_user_turn(skip_reply=True), 5)
            waited = time.monotonic() - pressed
        finally:
            await session.aclose()
    assert transcript == "打开车门"
    assert waited < 1.5, waited  # without the flush: LiveKit's 2 s transcript timeout, or the server's 20 s


async def test_usage_reaches_livekits_metrics_and_finals_carry_their_words(server) -> None:
    """``RECOGNITION_USAGE`` at each turn end becomes LiveKit's STT metrics (the audio sent), and
    on an engine that times words (the tone model) the final is word-aligned in stream time."""
    model = STT(server.url)
    assert model.capabilities.aligned_transcript == "word"
    metrics: list = []
    model.on("metrics_collected", metrics.append)
    pcm = tone_pcm("打开车门", tail_ms=1200)
    events = await stream_events(model, frames_16k(pcm), lambda evs: finals(evs))
    final = next(event for event in events if event.type is Kind.FINAL_TRANSCRIPT).alternatives[0]
    assert [str(word) for word in final.words] == ["打", "开", "车", "门"]
    starts = [word.start_time for word in final.words]
    assert starts == sorted(starts) and all(word.start_time < word.end_time for word in final.words)
    assert abs(starts[0] - final.start_time) < 0.1 and final.words[-1].end_time <= final.end_time + 0.1  # one clock
    assert all(0.99 < word.confidence <= 1.0 for word in final.words)
    streamed = sum(metric.audio_duration for metric in metrics if metric.streamed)
    assert streamed >= len(pcm) / 32000 - 0.02  # at least the audio pushed before the commit


def test_an_engine_without_word_times_turns_the_aligned_transcript_off() -> None:
    model = STT("ws://127.0.0.1:9/stt")  # never connected: the ready frame is given
    model._engine_is({"model": {"words": False}})
    assert model.capabilities.aligned_transcript is False
    assert STT("ws://127.0.0.1:9/stt", words=False).capabilities.aligned_transcript is False


async def test_recognize_paces_a_long_buffer_to_the_servers_limits(tmp_path: Path, model_cache: Path) -> None:
    """A buffer longer than the server's burst: sent at once, the excess is dropped with
    ``rate_limited``; paced to ``ready.limits`` (as ``kitt-stt transcribe`` does) it is heard whole."""
    limits = {"server": {"rate_limit": {"realtime_factor": 20.0, "burst_ms": 1000}}}
    with run_server(tmp_path, model_cache, limits) as strict:
        pcm = silence(2000) + tone_pcm("打开车门", tail_ms=1000)
        started = time.monotonic()
        result = await asyncio.wait_for(STT(strict.url).recognize(frames_16k(pcm)), 20)
        elapsed = time.monotonic() - started
    assert result.alternatives[0].text == "打开车门"
    assert elapsed < 3.0, elapsed  # paced at 20x, not in real time (3.9 s of audio)


async def test_input_queued_during_an_outage_is_paced_to_the_servers_limits(tmp_path: Path,
                                                                           model_cache: Path) -> None:
    """The server dies between turns and the user speaks before it is back: the audio LiveKit
    queued meanwhile (longer than the server's burst) must go out paced to ``ready.limits``,
    not at once, or the server drops part of it with ``rate_limited``."""
    port = free_port()
    holder: dict = {}
    limits = {"server": {"rate_limit": {"realtime_factor": 20.0, "burst_ms": 2000}}}
    with run_server(tmp_path, model_cache, limits, port=port) as first:
        model = STT(first.url, backoff_max_s=2.0, max_reconnects=20)  # ~37 s of tries: a slow restart under load fits
        errors: list = []
        model.on("error", errors.append)

        async def outage_before_speech(index: int) -> None:
            if index == 0 and "restart" not in holder:
                first.process.kill()
                first.process.wait(10)
                (tmp_path / "again").mkdir()
                holder["context"] = run_server(tmp_path / "again", model_cache, limits, port=port)
                holder["restart"] = asyncio.create_task(asyncio.to_thread(holder["context"].__enter__))

        try:
            events = await stream_events(model, frames_16k(silence(1500) + tone_pcm("打开车门", tail_ms=1200)),
                                         lambda evs: finals(evs), during=outage_before_speech)
        finally:
            if "restart" in holder:
                await holder["restart"]
                holder["context"].__exit__(None, None, None)
    assert finals(events) == ["打开车门"]
    assert not errors
