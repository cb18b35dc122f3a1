"""The text stage's ITN runs in a worker process, never on the event loop (issue 19): the grammars
hold the GIL for the whole call (~0.1 ms a character), so inline, a long final stalled every
session. Ordering still holds: finals of a seat leave in segment order, the commit after them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest

from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.client.session import connect
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.pipeline.turn import Turn
from kitt_stt.server.app import create_app
from kitt_stt.text.gate import TurnAction, WakeGate
from kitt_stt.text.itn import WetextNormalizer
from kitt_stt.text.language import TextLanguage
from kitt_stt.text.offload import ItnWorker, shared_worker
from kitt_stt.text.stage import StagedText, TextStage
from kitt_stt.text.wake import WakeMode, WakeSettings
from tests.engine_wrappers import NUMBER_WORDS, NumberWords
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, stream_through_seat, tone_pcm

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md

LONG, SHORT = NUMBER_WORDS["打开车门"], NUMBER_WORDS["关窗"]
CONFIG: dict[str, Any] = {"asr": {"chunk_pause_ms": 0, "use_itn": False}, "vad": {"silence_ms": 300},
                          "interim": {"enabled": False}, "turn": {"model": None, "wait_ms": 800}}


def one_turn_two_segments() -> bytes:
    return tone_pcm("打开车门", tail_ms=500) + tone_pcm("关窗", lead_ms=0, tail_ms=600)


def assert_normalised_in_order(frames: list[dict[str, Any]]) -> None:
    assert [f["type"] for f in frames if f["type"] in ("final", "commit")] == ["final", "final", "commit"]
    first, second = of_type(frames, "final")
    assert (first["segment_id"], second["segment_id"]) == (1, 2)  # the long one first, though slower
    assert first["text"] == "空调调到26度" * 20 and second["text"] == "音量调到30%"
    assert commits(frames)[0]["text"] == "空调调到26度" * 20 + "音量调到30%"  # the turn, restaged as one


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
    config = AppConfig.model_validate(CONFIG)
    # the first call spawns the worker and loads its grammars: a generous timeout
    frames = await stream_through_seat(NumberWords(tone_engine), config, SessionSettings(interim=False, language="zh"),
                                       one_turn_two_segments(), wait_ms=config.turn.wait_ms, timeout=30)
    assert_normalised_in_order(frames)
    assert inline == []  # not one text went through the grammars in this process


async def test_off_loop_final_equals_the_inline_one() -> None:
    stage = TextStage()
    for text, lang in ((LONG, "zh"), ("hey kitt, set the temperature to twenty six degrees", "en"),
                       ("打开车窗", "zh"), ("大開車門調到二十六度", "zh")):
        assert await stage.final_off_loop(text, lang) == stage.final(text, lang)


async def test_a_worker_that_died_while_idle_is_replaced_for_the_next_text() -> None:
    """The pool finds the death only when the next text is submitted: that text never ran, so a
    new process takes it (it used to fail, and its final went out without ITN)."""
    worker = ItnWorker()
    try:
        assert await worker.normalize("二十六度", TextLanguage.ZH) == "26度"
        [pid] = list(worker._executor()._processes)  # the one process (private: no public handle to it)
        os.kill(pid, 9)
        await asyncio.sleep(0.2)
        assert await worker.normalize("三十度", TextLanguage.ZH) == "30度"
        assert list(worker._executor()._processes) != [pid]
    finally:
        worker.close()


def stopped(worker: ItnWorker) -> int:
    """Stop ``worker``'s process (SIGSTOP): hung, not dead; its pid."""
    [pid] = list(worker._executor()._processes)
    os.kill(pid, signal.SIGSTOP)
    return pid


async def test_a_hung_worker_fails_its_calls_in_time_and_is_replaced_once(caplog) -> None:
    worker = ItnWorker(timeout_s=0.5)
    pid = None
    try:
        worker.start()
        pid = stopped(worker)
        first = asyncio.ensure_future(worker.normalize("二十度", TextLanguage.ZH))
        await asyncio.sleep(0.25)  # two more queue behind it, and are still waiting when it times out
        calls = [first, *(worker.normalize(f"{number}度", TextLanguage.ZH) for number in ("三十", "四十"))]
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)  # not for ever
        assert isinstance(results[0], TimeoutError), results
        assert all(isinstance(result, BrokenProcessPool) for result in results[1:]), results  # failed, not cancelled
        assert [r.message for r in caplog.records if "took over" in r.message] == [
            "the ITN worker took over 0.5 s on one text; killing it and starting a new one "
            "(texts meanwhile go out without ITN)"]  # once, for the three calls
        await wait_gone(pid)  # killed, not left stopped for ever
        assert await worker.normalize("五十度", TextLanguage.ZH) == "50度"  # a new process
    finally:
        if pid is not None and _state(pid) not in ("Z", "gone"):
            os.kill(pid, signal.SIGKILL)  # this test's own leftover, when it fails
        worker.close()


async def test_texts_queued_behind_others_on_a_healthy_worker_all_get_itn(caplog) -> None:
    """The watchdog counts progress, not each call's age: a burst of long finals queued past the
    timeout all get ITN while the worker keeps finishing them (the per-call timeout counted the
    queueing: the tail timed out, the healthy process was killed, and every queued final lost ITN)."""
    timeout_s, count = 0.5, 40
    worker = ItnWorker(timeout_s=timeout_s)
    try:
        worker.start()
        [pid] = list(worker._executor()._processes)
        started = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(
            *(worker.normalize(LONG * 2, TextLanguage.ZH) for _ in range(count)), return_exceptions=True), 60)
        queued_s = time.monotonic() - started
        assert results == ["空调调到26度" * 40] * count, {type(result) for result in results}
        assert queued_s > 2 * timeout_s, queued_s  # the last ones waited well past the timeout
        assert list(worker._executor()._processes) == [pid]  # the same process: not taken for hung
        assert not [r for r in caplog.records if "took over" in r.message]
    finally:
        worker.close()


async def test_a_failing_worker_costs_a_woken_command_its_numbers_only(monkeypatch) -> None:
    """Required wake mode: a turn whose ITN fails is committed without ITN, wake phrase and all;
    it used to go out as recognised, its wake match lost, and was filtered (``no_wake``)."""
    worker = ItnWorker(timeout_s=0.3)
    pid = None
    try:
        worker.start()
        pid = stopped(worker)
        monkeypatch.setattr("kitt_stt.text.stage.shared_worker", lambda: worker)
        stage = TextStage(wake=WakeSettings(mode=WakeMode.REQUIRED, phrases=("你好小凯",)))
        turn = woken_turn(stage, "空调调到二十六度")
        final, _ = await asyncio.wait_for(asyncio.gather(  # both wait on the hung worker
            stage.final_off_loop("你好小凯空调调到二十六度", "zh"), turn.stage_off_loop()), 10)
        assert final.text == "空调调到二十六度" and final.wake is not None  # no ITN, the wake kept
        staged = turn.staged()
        assert staged.text == "空调调到二十六度" and staged.wake is not None, staged
        decision = WakeGate().decide(stage.wake_settings, staged, 0, 1000)
        assert decision is not None and decision.action is TurnAction.COMMIT, decision
        assert await stage.final_off_loop("二十六度", "zh") == StagedText("26度")  # a new worker, given time to start
    finally:
        if pid is not None and _state(pid) not in ("Z", "gone"):
            os.kill(pid, signal.SIGKILL)
        worker.close()


async def test_a_real_server_normalises_in_its_worker_process_in_order(tmp_path, model_cache) -> None:
    """Two seats at once, each a long final full of number words and a short one in one turn."""
    seats = ("driver", "passenger")
    with run_server(tmp_path, model_cache, CONFIG, module="tests.number_words_server") as server:
        async with connect(server.url) as session:
            await session.start(arbitration=False)  # the same speech on both seats: each must decode it
            await asyncio.gather(*(send_pcm(session, one_turn_two_segments(), seat=seat, realtime_factor=1.0)
                                   for seat in seats))
            frames = await collect_until(session, lambda fs: len(commits(fs)) == len(seats), timeout=30)
        workers = itn_workers(server.process.pid)
    for seat in seats:
        assert_normalised_in_order([f for f in frames if f.get("seat") == seat])
    assert len(workers) == 1, workers  # the server's one ITN process did it


def woken_turn(stage: TextStage, command: str) -> Turn:
    """A turn of two finals as the seat sends them: the wake phrase alone, then ``command``."""
    turn = Turn(start_ms=0, stage=stage)
    for segment_id, text in ((1, "你好小凯"), (2, command)):
        turn.segment_ids.append(segment_id)
        turn.texts[segment_id] = text
        turn.staged_finals[segment_id] = stage.interim(text, "zh", detect_wake=turn.at_start(segment_id))
        turn.langs.add("zh")
    return turn


@pytest.mark.parametrize("command", ["打开车门", "打开车门" * 60])  # restaged as one; too long: joined as sent
async def test_a_turn_whose_restaging_fails_commits_its_finals_with_their_wake(command: str, monkeypatch) -> None:
    """Whatever fails in the stage, the turn falls back to its finals as they were sent: the wake
    match the first one carried still makes the turn a woken command (``commit``), neither
    ``no_wake`` (it used to be the raw text) nor ``wake_only`` (the first final's own ``rest``)."""
    stage = TextStage(wake=WakeSettings(mode=WakeMode.REQUIRED, phrases=("你好小凯",)))

    async def broken(*args: object, **kwargs: object) -> StagedText:
        raise RuntimeError("the text stage failed")

    monkeypatch.setattr(stage, "final_off_loop", broken)
    turn = woken_turn(stage, command)
    await turn.stage_off_loop()
    staged = turn.staged()
    assert staged.text == command and staged.wake is not None and staged.wake.rest == command
    decision = WakeGate().decide(stage.wake_settings, staged, 0, 1000)
    assert decision is not None and decision.action is TurnAction.COMMIT, decision


@pytest.mark.parametrize("command", ["打开车门", "打开车门" * 60])
def test_a_turn_staged_on_the_loop_falls_back_the_same_way(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same fallback when the stage runs in-process (a final that arrived after the off-loop
    run): the turn itself owns it, so every caller of ``staged`` gets it."""
    stage = TextStage(wake=WakeSettings(mode=WakeMode.REQUIRED, phrases=("你好小凯",)))

    def broken(*args: object, **kwargs: object) -> StagedText:
        raise RuntimeError("the text stage failed")

    monkeypatch.setattr(stage, "final", broken)
    staged = woken_turn(stage, command).staged()
    assert staged.text == command and staged.wake is not None and staged.wake.rest == command


def itn_workers(pid: int) -> dict[int, str]:
    """Command lines of ``pid``'s children that multiprocessing spawned, by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if parent == pid and "spawn_main" in command:  # not its resource tracker
            found[int(stat.parent.name)] = command
    return found


async def test_the_app_stops_the_itn_worker_when_its_lifespan_ends(tone_engine) -> None:
    """Not at interpreter exit: a process that embeds the app (or starts it again) must not keep
    the worker and its grammars (~80 MB) once the service has stopped."""
    app = create_app(AppConfig.model_validate({"turn": {"model": None}}), tone_engine)
    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + 60
        while not app.state.service.ready:  # the warm-up spawned the worker
            assert time.monotonic() < deadline and app.state.service.load_error is None
            await asyncio.sleep(0.05)
        assert await shared_worker().normalize("二十六度", TextLanguage.ZH) == "26度"
        [pid] = list(shared_worker()._executor()._processes)
    await wait_gone(pid)


def test_a_sigtermed_server_stops_its_itn_worker_before_it_exits(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache) as server:
        [pid] = itn_workers(server.process.pid)
        assert server.terminate() == 0
        log = server.log()
    assert _state(pid) in ("Z", "gone")
    assert "ITN worker stopped" in log, log[-2000:]  # by the lifespan, not only by the interpreter's exit
    assert log.index("ITN worker stopped") < log.index("Application shutdown complete")


async def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _state(pid) not in ("Z", "gone"):
        assert time.monotonic() < deadline, f"the ITN worker {pid} is still there"
        await asyncio.sleep(0.05)


async def test_the_worker_outlives_a_signal_to_the_process_group() -> None:
    """Ctrl-C reaches every process of the terminal's group: the server drains its sessions, whose
    finals still need ITN, so the worker must not die first."""
    worker = ItnWorker()
    try:
        assert await worker.normalize("二十六度", TextLanguage.ZH) == "26度"
        [pid] = list(worker._executor()._processes)
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        await asyncio.sleep(0.2)
        assert await worker.normalize("三十度", TextLanguage.ZH) == "30度"
        assert list(worker._executor()._processes) == [pid]  # the same process, not a replacement
    finally:
        worker.close()


def test_the_worker_exits_when_the_server_is_killed(tmp_path) -> None:
    """A server killed outright (SIGKILL, out of memory) must not leave its ITN worker behind,
    holding its grammars (~80 MB) for ever."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import time\n"
        "from kitt_stt.text.offload import shared_worker\n"
        "if __name__ == '__main__':\n"
        "    worker = shared_worker()\n"
        "    worker.start()\n"
        "    print(*worker._executor()._processes, flush=True)\n"
        "    time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    worker_pid = None
    try:
        assert owner.stdout is not None
        worker_pid = int(owner.stdout.readline())
        owner.kill()
        owner.wait(10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{worker_pid}").exists() and _state(worker_pid) != "Z":
            assert time.monotonic() < deadline, "the worker outlived its server"
            time.sleep(0.05)
    finally:
        if owner.poll() is None:
            owner.kill()
        if worker_pid is not None and _state(worker_pid) not in ("Z", "gone"):
            os.kill(worker_pid, signal.SIGKILL)  # this test's own leftover, when it fails


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
