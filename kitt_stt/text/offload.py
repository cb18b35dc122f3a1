"""Inverse text normalisation in a worker process, so the event loop never waits on the grammars.

ITN's cost grows with the text (0.1-0.4 ms a Mandarin character on the development machine, by
its load: 40-130 ms for 320), and every session shares the one event loop. The options, measured side by side
(``utils/performance/text_loop_lag.py``, numbers in ``docs/text.md``):

* a thread frees almost nothing: kaldifst holds the GIL for a whole call, so the loop's thread
  waits for the GIL as long as the call runs;
* cutting the text at sentence boundaries and yielding between pieces bounds a stall only when
  the text has punctuation every few dozen characters (SenseVoice and Whisper often write none), and
  a cut inside a number changes what the grammars read;
* a process is free of the GIL whatever the text: the loop only pickles a string (~0.5 ms round
  trip for a short one) and awaits. One process serves the whole service (calls queue there, in
  order); it is spawned, not forked (the server has engine threads), and loads the grammars once,
  at start-up when :func:`kitt_stt.text.load` is asked to. Spawning re-imports the program's main
  module, so a script that starts the service guards its start with ``if __name__ == "__main__"``
  (``python -m kitt_stt`` and the ``kitt-stt`` command need nothing).

The worker must not take the service down with it. A process that died while idle is found when
the next text is submitted: that text never ran, so it goes to a fresh process at once. A process
that dies during a text, or takes longer than :data:`CALL_TIMEOUT_S` on it (hung, not dead: every
final and every drain would wait behind it; a new process's first call gets :data:`START_TIMEOUT_S`,
as it waits for the grammars to load), fails that call; a hung one is killed and replaced,
once, with one log line. The caller sends its text without ITN then
(:meth:`~kitt_stt.text.stage.TextStage.final_off_loop`). The server stops the worker at the end
of its lifespan, after the drain (``kitt_stt/server/app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from kitt_stt.text.itn import ItnParams, WetextNormalizer, has_number
from kitt_stt.text.language import TextLanguage

log = logging.getLogger(__name__)

#: The longest one text may take in the worker, queueing there included: the longest final the
#: grammars see (320 characters) takes 40-130 ms, so this is a hang, not a long text.
CALL_TIMEOUT_S = 2.0
#: The same for a process's first call, which waits for it to spawn and load its grammars.
START_TIMEOUT_S = 30.0


def _start_worker() -> None:
    """In the worker process: the grammars loaded once; Ctrl-C or a SIGTERM sent to the whole
    process group left to the server, which drains its sessions (their finals still need ITN) and
    then stops this process; and an exit of its own when the server dies without stopping it
    (SIGKILL, out of memory), or it would hold its grammars forever: the task queue's pipe never
    closes, since this process holds both of its ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="parent-watch", daemon=True).start()
    WetextNormalizer.load()


def _exit_with(parent_sentinel: int) -> None:
    multiprocessing.connection.wait([parent_sentinel])  # ready when the parent has exited
    os._exit(0)


def _normalize(text: str, language: str, params: ItnParams) -> str:
    """Runs in the worker process."""
    return WetextNormalizer(params).normalize(text, TextLanguage(language))


class ItnWorker:
    """One worker process with the ITN grammars loaded; started on first use or by :meth:`start`.
    ``timeout_s``: the longest a call may take before the process is taken for hung."""

    def __init__(self, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._timeout_s = timeout_s
        self._started: ProcessPoolExecutor | None = None  # the pool whose process has answered once

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_worker)
            return self._pool

    def start(self) -> None:
        """Blocking: spawn the process and wait until its grammars are loaded (start-up warm-up)."""
        pool = self._executor()
        pool.submit(_normalize, "一", str(TextLanguage.ZH), ItnParams()).result()
        self._started = pool

    async def normalize(self, text: str, language: TextLanguage, params: ItnParams | None = None) -> str:
        """``text`` through :class:`WetextNormalizer` in the worker; a text the grammars cannot
        change (no numeral, no number word: most commands) does not leave the loop. Raises when the
        worker fails this text (it died or hung during it, or the grammars raised)."""
        if not has_number(text, language):
            return text
        pool, future = self._submit(text, language, params or ItnParams())
        timeout_s = self._timeout_s if pool is self._started else START_TIMEOUT_S
        try:
            written = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except BrokenProcessPool:
            self._replace(pool, "the ITN worker process died during a text; starting a new one for the next")
            raise
        except asyncio.TimeoutError:  # not the builtin on 3.10
            self._replace(pool, f"the ITN worker took over {timeout_s:g} s on one text; "
                                "killing it and starting a new one (texts meanwhile go out without ITN)")
            raise
        except Exception:
            log.exception("ITN failed on a text in the worker process")
            raise
        self._started = pool
        return written

    def _submit(self, text: str, language: TextLanguage, params: ItnParams) -> tuple[ProcessPoolExecutor, Future[str]]:
        """The call queued in the worker; a process that died while idle is only found here, and
        as this text never ran, a fresh process takes it."""
        pool = self._executor()
        try:
            return pool, pool.submit(_normalize, text, str(language), params)
        except BrokenProcessPool:
            self._replace(pool, "the ITN worker process had died; starting a new one")
            pool = self._executor()
            return pool, pool.submit(_normalize, text, str(language), params)

    def _replace(self, pool: ProcessPoolExecutor, why: str) -> None:
        """Stop ``pool`` (killing its process: a hung one would never exit) and let the next call
        start a new one; said once, however many calls found the same fault."""
        with self._lock:
            if self._pool is not pool:
                return
            self._pool = None
        log.error(why)
        _stop(pool, wait_s=0.0)

    def close(self) -> None:
        """Stop the process: texts still queued there get up to the call timeout, then it is
        killed (they fail, and go out without ITN), so the server's exit never waits on it."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool, wait_s=self._timeout_s)
            log.info("ITN worker stopped")


def _stop(pool: ProcessPoolExecutor, wait_s: float) -> None:
    """Shut ``pool`` down without waiting on a process that does not exit: it gets ``wait_s`` to
    finish, then SIGKILL (it ignores SIGTERM, see :func:`_start_worker`). Queued calls are not
    cancelled: a cancelled future would cancel the session task awaiting it; after the kill they
    fail with ``BrokenProcessPool``, which their callers handle."""
    processes = list((pool._processes or {}).values())  # private: the executor has no public handle
    pool.shutdown(wait=False)
    deadline = time.monotonic() + wait_s
    for process in processes:
        if not multiprocessing.connection.wait([process.sentinel], max(0.0, deadline - time.monotonic())):
            process.kill()  # still running (its sentinel is ready once it exits; the pool's thread reaps it)


_shared = ItnWorker()


def shared_worker() -> ItnWorker:
    """The process-wide worker every :class:`~kitt_stt.text.stage.TextStage` sends its ITN to."""
    return _shared
