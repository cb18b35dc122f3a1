"""pipecat (real ``pipecat-ai`` from the ``pipecat`` extra) with KittSTTService against a real server.

A WAV of tone speech goes through a pipecat pipeline ``KittSTTService -> recorder -> user
aggregator -> recorder``: the server's frames must come out as pipecat's transcription and turn
frames in order, and the user aggregator (pipecat's own turn logic, with the external turn
strategies the service recommends) must open and close the user's turn on them, with no local
VAD. Reconnect: the server is killed mid-utterance and started again on the same port; the
turn's audio is replayed and the utterance committed whole, once.
"""

from __future__ import annotations

import asyncio
import io
import signal
import sys
import time
import wave
from pathlib import Path

import msgpack
import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("pipecat-ai 1.14 needs Python >= 3.11, so the pipecat extra installs nothing on 3.10",
                allow_module_level=True)
pytest.importorskip("pipecat", reason="the pipecat extra is not installed (pip install 'kitt-stt[pipecat]')")

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from kitt_stt.integrations.pipecat import KittSTTService
from tests.helpers import cough_pcm, free_port, run_server, silence, tone_pcm, wav_bytes

WATCHED = (ProposedUserStartedSpeakingFrame, InterimTranscriptionFrame, TranscriptionFrame,
           ProposedUserStoppedSpeakingFrame, UserStartedSpeakingFrame, UserStoppedSpeakingFrame, LLMContextFrame,
           ErrorFrame)


class Recorder(FrameProcessor):
    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.frames: list[Frame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame) or (isinstance(frame, WATCHED) and direction is FrameDirection.DOWNSTREAM):
            self.frames.append(frame)
        await self.push_frame(frame, direction)


def wav_chunks(data: bytes, chunk_ms: int = 10) -> list[bytes]:
    """The WAV's PCM in the chunks a transport would deliver (10 ms: not our 20 ms frame size)."""
    with wave.open(io.BytesIO(data), "rb") as handle:
        pcm = handle.readframes(handle.getnframes())
        size = handle.getframerate() * handle.getnchannels() * 2 * chunk_ms // 1000
    return [pcm[i:i + size] for i in range(0, len(pcm), size)]


def names(frames: list[Frame]) -> list[str]:
    """Frame types in order, with runs of interims collapsed (how many depends on timing)."""
    out: list[str] = []
    for frame in frames:
        name = type(frame).__name__
        if not (out and out[-1] == name == "InterimTranscriptionFrame"):
            out.append(name)
    return out


async def run_pipeline(service: KittSTTService, chunks: list[bytes], wait_for, pace_s: float = 0.002,
                       during=None, quiet_s: float = 0.0, rate: int = 16000,
                       channels: int = 1) -> tuple[Recorder, Recorder, Recorder]:
    """Feed ``chunks`` into a pipecat pipeline; end it once ``wait_for(before, head)`` holds.
    ``head`` sits before the service and sees what it pushes upstream (errors)."""
    head, before, after = Recorder("head"), Recorder("before-aggregator"), Recorder("after-aggregator")
    aggregators = LLMContextAggregatorPair(LLMContext())
    worker = PipelineWorker(Pipeline([head, service, before, aggregators.user(), after]),
                            params=PipelineParams(audio_in_sample_rate=rate), cancel_on_idle_timeout=False)
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_worker, _frame) -> None:
        started.set()

    async def feed() -> None:
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(quiet_s)  # a pipeline that sends no audio at all for this long
        for index, chunk in enumerate(chunks):
            await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=rate, num_channels=channels))
            if during is not None:
                await during(index)
            await asyncio.sleep(pace_s)
        for _ in range(300):  # up to 30 s for the server's commit to come through
            if wait_for(before, head):
                break
            quiet = bytes(rate * channels * 2 // 100)  # 10 ms
            await worker.queue_frame(InputAudioRawFrame(audio=quiet, sample_rate=rate, num_channels=channels))
            await asyncio.sleep(0.1)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), feed()), 60)
    return before, after, head


def committed(recorder: Recorder) -> list[str]:
    return [frame.text for frame in recorder.frames if isinstance(frame, TranscriptionFrame)]


async def test_wav_through_a_pipecat_pipeline_gives_transcription_and_turn_frames_in_order(server) -> None:
    audio = wav_bytes(tone_pcm("打开车门", tail_ms=1200))
    service = KittSTTService(server.url, seat="driver", language="zh")
    before, after, _ = await run_pipeline(service, wav_chunks(audio), lambda rec, _: committed(rec))

    assert committed(before) == ["打开车门"]
    final = next(frame for frame in before.frames if isinstance(frame, TranscriptionFrame))
    assert final.finalized and final.result["type"] == "commit" and final.result["seat"] == "driver"
    assert names(before.frames) == ["ProposedUserStartedSpeakingFrame", "InterimTranscriptionFrame",
                                    "TranscriptionFrame", "ProposedUserStoppedSpeakingFrame"]
    interims = [frame.text for frame in before.frames if isinstance(frame, InterimTranscriptionFrame)]
    assert interims[-1] == "打开车门" and all("打开车门".startswith(text) for text in interims)
    # pipecat's own user-turn logic opened and closed the turn on the server's decisions
    kinds = names(after.frames)
    assert kinds.index("UserStartedSpeakingFrame") < kinds.index("UserStoppedSpeakingFrame")
    context = next(frame for frame in after.frames if isinstance(frame, LLMContextFrame))
    assert context.context.get_messages()[-1]["content"] == "打开车门"
    assert not [frame for frame in before.frames if isinstance(frame, ErrorFrame)]


async def test_two_turns_arrive_as_two_committed_transcriptions(server) -> None:
    # the server's turn wait runs on the wall clock: the pause must last there too (1 s at this pace)
    pcm = tone_pcm("打开车门", tail_ms=2000) + tone_pcm("关车窗", tail_ms=1200)
    service = KittSTTService(server.url, seat="rear left")
    before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(pcm)), lambda rec, _: len(committed(rec)) >= 2,
                                    pace_s=0.005)
    assert committed(before) == ["打开车门", "关车窗"]
    kinds = [name for name in names(before.frames) if name != "InterimTranscriptionFrame"]
    assert kinds == ["ProposedUserStartedSpeakingFrame", "TranscriptionFrame", "ProposedUserStoppedSpeakingFrame"] * 2


async def test_a_filtered_turn_closes_the_users_turn_without_a_transcription(server) -> None:
    service = KittSTTService(server.url, start_options={"wake": {"phrases": ["ABC"], "mode": "required"}})
    pcm = tone_pcm("打开车门", tail_ms=2000) + tone_pcm("ABC关窗", tail_ms=1200)
    before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(pcm)), lambda rec, _: committed(rec), pace_s=0.005)
    assert committed(before) == ["关窗"]
    kinds = [name for name in names(before.frames) if name != "InterimTranscriptionFrame"]
    assert kinds == ["ProposedUserStartedSpeakingFrame", "ProposedUserStoppedSpeakingFrame",
                     "ProposedUserStartedSpeakingFrame", "TranscriptionFrame", "ProposedUserStoppedSpeakingFrame"]


async def test_a_48khz_stereo_pipeline_is_sent_as_16khz_mono(server) -> None:
    mono = np.frombuffer(tone_pcm("关车窗", tail_ms=1200), "<i2")
    times = np.arange(mono.shape[0] * 3) / 48000
    up = np.interp(times, np.arange(mono.shape[0]) / 16000, mono.astype(float)).astype("<i2")
    stereo = np.stack([up, up], axis=1).reshape(-1).tobytes()
    service = KittSTTService(server.url, hotwords=["车窗:2"])
    before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(stereo, rate=48000, channels=2)),
                                    lambda rec, _: committed(rec), rate=48000, channels=2)
    assert committed(before) == ["关车窗"]


async def test_server_errors_become_pipecat_error_frames(server) -> None:
    service = KittSTTService(server.url, language="xx")  # a language the server refuses: bad_field
    *_, head = await run_pipeline(service, wav_chunks(wav_bytes(silence(200))),
                                  lambda _, up: any(isinstance(f, ErrorFrame) for f in up.frames))
    errors = [frame for frame in head.frames if isinstance(frame, ErrorFrame)]
    assert errors and "bad_field" in errors[0].error and "xx" in errors[0].error


async def test_keepalive_holds_a_quiet_session_open(tmp_path: Path, model_cache: Path) -> None:
    # a server that ends quiet sessions after 1 s, and wants its token
    with run_server(tmp_path, model_cache, {"server": {"idle_timeout_s": 1.0, "auth_token": "k1"}}) as strict:
        service = KittSTTService(strict.url, keepalive_s=0.3, token="k1")
        disconnects: list = []

        @service.event_handler("on_disconnected")
        async def _gone(_service) -> None:
            disconnects.append(True)

        before, _, head = await run_pipeline(service, wav_chunks(wav_bytes(tone_pcm("打开车门", tail_ms=1200))),
                                             lambda rec, _: committed(rec), quiet_s=3.0)
    assert committed(before) == ["打开车门"]
    assert not [frame for frame in head.frames if isinstance(frame, ErrorFrame)]  # no idle_timeout
    assert len(disconnects) == 1  # only the pipeline's own end closed the session


async def test_finalize_on_the_pipelines_vad_stop_commits_at_once(tmp_path: Path, model_cache: Path) -> None:
    from pipecat.frames.frames import VADUserStoppedSpeakingFrame

    # a server that would wait 20 s of silence before committing: only finalize can commit in time
    with run_server(tmp_path, model_cache, {"turn": {"wait_ms": 20_000}}) as slow:
        service = KittSTTService(slow.url)
        sent = []

        async def stop_after_speech(index: int) -> None:
            if index == 140 and not sent:  # 1.4 s in: the utterance is over
                sent.append(True)
                await service.queue_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))

        before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(tone_pcm("打开车门", tail_ms=400))),
                                       lambda rec, _: committed(rec), during=stop_after_speech)
    final = next(frame for frame in before.frames if isinstance(frame, TranscriptionFrame))
    assert final.text == "打开车门" and final.result["metadata"]["eot"]["decision"]["reason"] == "finalize"


async def test_reconnect_after_a_server_restart_replays_the_turn(tmp_path: Path, model_cache: Path) -> None:
    port = free_port()
    holder: dict = {}
    with run_server(tmp_path, model_cache, port=port) as first:
        holder["server"] = first
        service = KittSTTService(first.url)  # the default backoff: 6 attempts, waits capped at 8 s

        async def restart_mid_utterance(index: int) -> None:
            if index == 80 and "restarted" not in holder:  # 0.8 s in: in the middle of 打开车门
                holder["restarted"] = True
                first.process.kill()  # no drain, no commit: the turn exists only in the client's buffer
                first.process.wait(10)
                holder["second"] = await asyncio.to_thread(_start_again, tmp_path, model_cache, port)

        try:
            before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(tone_pcm("打开车门", tail_ms=1200))),
                                           lambda rec, _: committed(rec), during=restart_mid_utterance)
        finally:
            second = holder.get("second")
            if second is not None:
                second[1].__exit__(None, None, None)
    assert committed(before) == ["打开车门"]
    # one turn: the replay's repeated speech_start does not start the turn again
    assert names(before.frames).count("ProposedUserStartedSpeakingFrame") == 1


def _start_again(tmp_path: Path, model_cache: Path, port: int):
    context = run_server(tmp_path / "again", model_cache, port=port)
    (tmp_path / "again").mkdir(exist_ok=True)
    return context.__enter__(), context


async def test_a_cough_ends_the_users_turn_so_the_next_turn_starts(server) -> None:
    """A 200 ms cough opens a turn with nothing to commit: pipecat's user aggregator must see the
    user stop (or the bot never gets its turn) and then a new start for the real turn."""
    pcm = cough_pcm() + tone_pcm("打开车门", lead_ms=0, tail_ms=1200)
    before, after, _ = await run_pipeline(KittSTTService(server.url), wav_chunks(wav_bytes(pcm)),
                                          lambda rec, _: committed(rec), pace_s=0.005)
    assert committed(before) == ["打开车门"]
    assert [name for name in names(before.frames) if name != "InterimTranscriptionFrame"] == \
        ["ProposedUserStartedSpeakingFrame", "ProposedUserStoppedSpeakingFrame",
         "ProposedUserStartedSpeakingFrame", "TranscriptionFrame", "ProposedUserStoppedSpeakingFrame"]
    turns = [name for name in names(after.frames) if name in ("UserStartedSpeakingFrame", "UserStoppedSpeakingFrame")]
    assert turns == ["UserStartedSpeakingFrame", "UserStoppedSpeakingFrame"] * 2


async def test_speech_while_the_server_is_down_is_replayed_whole_and_in_order(tmp_path: Path,
                                                                              model_cache: Path) -> None:
    """The server dies between turns and the user speaks before it is back: no ``speech_start``
    can say a turn began, yet all of it must be kept for the replay (not only the last second), and
    live audio must wait until the replay is out (the socket is published after it)."""
    port = free_port()
    holder: dict = {}
    pcm = silence(600) + tone_pcm("打开车门", tail_ms=1200)
    replayed: list[bytes] = []  # the audio sent on the connection after the restart, in order

    with run_server(tmp_path, model_cache, port=port) as first:
        service = KittSTTService(first.url, reconnect_backoff_max_wait=2.0)
        connect = service._websocket_connect

        async def recording_connect(*args, **kwargs):
            if "killed" in holder:  # the attempt waits for the restart (as on a slow link), so a restart
                await asyncio.shield(holder["restart"])  # that is slow under load cannot use up the tries
            websocket = await connect(*args, **kwargs)
            if "killed" in holder:
                send = websocket.send

                async def send_and_record(message: bytes) -> None:
                    frame = msgpack.unpackb(message)
                    if frame["type"] == "audio":
                        replayed.append(frame["pcm"])
                        await asyncio.sleep(0.002)  # as a busy socket yields: live audio comes meanwhile
                    await send(message)

                websocket.send = send_and_record
            return websocket

        service._websocket_connect = recording_connect  # type: ignore[method-assign]

        async def outage_before_speech(index: int) -> None:
            if index == 0 and "killed" not in holder:
                holder["killed"] = True
                first.process.kill()  # between turns: nothing of the coming speech has reached it
                first.process.wait(10)
                holder["restart"] = asyncio.create_task(asyncio.to_thread(_start_again, tmp_path, model_cache, port))

        try:
            before, *_ = await run_pipeline(service, wav_chunks(wav_bytes(pcm)), lambda rec, _: committed(rec),
                                           during=outage_before_speech)
        finally:
            if "restart" in holder:
                (await holder["restart"])[1].__exit__(None, None, None)
    assert committed(before) == ["打开车门"]
    sent = b"".join(replayed)
    speech = pcm[len(silence(600)):]
    fed = pcm + bytes(len(sent))  # what the pipeline pushed: the WAV, then 10 ms silences
    assert speech in sent and fed.find(sent) >= 0  # all the speech, and no frame out of its place


async def test_a_cancel_stops_at_once_even_when_the_server_does_not_answer(server) -> None:
    """pipecat cancels by stopping now: the service must not wait for the server's flush (3 s) nor
    for a closing handshake with a server that has stopped answering."""
    service = KittSTTService(server.url)
    worker = PipelineWorker(Pipeline([service, Recorder("after")]), params=PipelineParams(audio_in_sample_rate=16000),
                            cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        deadline = time.monotonic() + 20
        while service.ready is None:  # started and connected (however long that takes under load)
            assert time.monotonic() < deadline, "the service never connected"
            await asyncio.sleep(0.05)
        for chunk in wav_chunks(wav_bytes(tone_pcm("打开车门", tail_ms=0))):  # a turn open on the server
            await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=16000, num_channels=1))
        await asyncio.sleep(0.3)
        server.process.send_signal(signal.SIGSTOP)  # it answers nothing from now on
        started = time.monotonic()
        await worker.cancel()
        await asyncio.wait_for(running, 10)
        elapsed = time.monotonic() - started
    finally:
        server.process.send_signal(signal.SIGCONT)
        if not running.done():
            running.cancel()
    assert elapsed < 2.5, elapsed  # waiting for the server's flush took 3 s and more
