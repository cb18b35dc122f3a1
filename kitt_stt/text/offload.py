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
that dies during a text fails that call. One that is busy and finishes no call for
:data:`CALL_TIMEOUT_S` is hung, not dead (every final and every drain would wait behind it; a new
process gets :data:`START_TIMEOUT_S`, as it loads its grammars first): it is killed and replaced,
once, with one log line, and the calls queued there fail. The watch is on progress, not on each
call's age: a call waiting behind others is not late while the ones ahead of it keep finishing
(the per-call timeout it replaced counted queueing, so a burst of ~15 long finals made a healthy
worker look hung, and every queued final lost its ITN). The caller sends its text without ITN then
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

#: The longest a busy worker may go without finishing a call: the longest final the grammars see
#: (320 characters) takes 40-130 ms, so this is a hang, not a long text.
CALL_TIMEOUT_S = 2.0
#: The same for a process that has not answered yet: it spawns and loads its grammars first.
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


class _Progress:
    """What one pool's process is doing: the calls it holds, in order, and when it last finished
    one (or, idle until then, took the first one): the watchdog's clock. Completions are counted
    on the pool's own thread, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Future[str]] = []
        self._since = time.monotonic()
        self.answered = False  # a call has finished: the grammars are loaded

    def submitted(self, future: Future[str]) -> None:
        with self._lock:
            if not self._pending:
                self._since = time.monotonic()  # busy from now; idle time is no stall
            self._pending.append(future)
        future.add_done_callback(self._finished)

    def _finished(self, future: Future[str]) -> None:
        with self._lock:
            self._pending.remove(future)
            if not future.cancelled():  # a call its caller gave up on is no sign of life
                self._since = time.monotonic()
                self.answered = self.answered or future.exception() is None

    def stalled_for(self) -> float:
        """Seconds the process has been busy without finishing a call (0 when idle)."""
        with self._lock:
            return time.monotonic() - self._since if self._pending else 0.0

    def is_first(self, future: Future[str]) -> bool:
        """Whether ``future`` is the oldest call held: the one the process is on, which a hang fails."""
        with self._lock:
            return bool(self._pending) and self._pending[0] is future


class ItnWorker:
    """One worker process with the ITN grammars loaded; started on first use or by :meth:`start`.
    ``timeout_s``: the longest the busy process may go without finishing a call before it is
    taken for hung."""

    def __init__(self, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._progress = _Progress()  # the current pool's
        self._lock = threading.Lock()
        self._timeout_s = timeout_s

    def _executor(self) -> ProcessPoolExecutor:
        return self._current()[0]

    def _current(self) -> tuple[ProcessPoolExecutor, _Progress]:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_worker)
                self._progress = _Progress()
            return self._pool, self._progress

    def start(self) -> None:
        """Blocking: spawn the process and wait until its grammars are loaded (start-up warm-up)."""
        pool, progress = self._current()
        future = pool.submit(_normalize, "一", str(TextLanguage.ZH), ItnParams())
        progress.submitted(future)
        future.result()
        progress.answered = True  # now, not when the pool's thread gets to the callback

    async def normalize(self, text: str, language: TextLanguage, params: ItnParams | None = None) -> str:
        """``text`` through :class:`WetextNormalizer` in the worker; a text the grammars cannot
        change (no numeral, no number word: most commands) does not leave the loop. Raises when the
        worker fails this text (it died or hung before finishing it, or the grammars raised)."""
        if not has_number(text, language):
            return text
        pool, progress, future = self._submit(text, language, params or ItnParams())
        try:
            return await self._watched(pool, progress, future)
        except BrokenProcessPool:
            self._replace(pool, "the ITN worker process died during a text; starting a new one for the next")
            raise
        except TimeoutError:  # said by the watchdog
            raise
        except Exception:
            log.exception("ITN failed on a text in the worker process")
            raise

    async def _watched(self, pool: ProcessPoolExecutor, progress: _Progress, future: Future[str]) -> str:
        """``future``'s text once it is there, however long it queues, while the process keeps
        finishing calls. The oldest call held judges a stall: once the process has finished none
        for the timeout, it replaces the process and raises ``TimeoutError``; the calls behind it
        then fail with ``BrokenProcessPool``. The others judge only a timeout later, in case the
        oldest one has no waiter left."""
        result = asyncio.wrap_future(future)
        result.add_done_callback(_retrieved)
        try:
            while not result.done():
                limit_s = self._timeout_s if progress.answered else START_TIMEOUT_S
                grace_s = 0.0 if progress.is_first(future) else self._timeout_s
                left_s = limit_s + grace_s - progress.stalled_for()
                if left_s <= 0 and self._replace(pool, f"the ITN worker took over {limit_s:g} s on one text; "
                                                       "killing it and starting a new one "
                                                       "(texts meanwhile go out without ITN)"):
                    raise TimeoutError(f"the ITN worker finished no text in {limit_s:g} s")
                if left_s <= 0 or self._pool is not pool:  # killed: this call fails with it, shortly
                    await asyncio.wait({result}, timeout=self._timeout_s)
                    if not result.done():
                        raise TimeoutError(f"the ITN worker finished no text in {limit_s:g} s")
                    break
                # woken at least once a timeout: the limit drops to it once the process has answered
                await asyncio.wait({result}, timeout=min(left_s, self._timeout_s))
        except asyncio.CancelledError:
            result.cancel()  # the caller is gone: its text need not run (a no-op once it runs)
            raise
        return result.result()

    def _submit(self, text: str, language: TextLanguage,
                params: ItnParams) -> tuple[ProcessPoolExecutor, _Progress, Future[str]]:
        """The call queued in the worker; a process that died while idle is only found here, and
        as this text never ran, a fresh process takes it."""
        pool, progress = self._current()
        try:
            future = pool.submit(_normalize, text, str(language), params)
        except BrokenProcessPool:
            self._replace(pool, "the ITN worker process had died; starting a new one")
            pool, progress = self._current()
            future = pool.submit(_normalize, text, str(language), params)
        progress.submitted(future)
        return pool, progress, future

    def _replace(self, pool: ProcessPoolExecutor, why: str) -> bool:
        """Stop ``pool`` (killing its process: a hung one would never exit) and let the next call
        start a new one; said once, however many calls found the same fault: False for all but
        the first."""
        with self._lock:
            if self._pool is not pool:
                return False
            self._pool = None
        log.error(why)
        _stop(pool, wait_s=0.0)
        return True

    def close(self) -> None:
        """Stop the process: texts still queued there get up to the call timeout, then it is
        killed (they fail, and go out without ITN), so the server's exit never waits on it."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool, wait_s=self._timeout_s)
            log.info("ITN worker stopped")


def _retrieved(result: asyncio.Future[str]) -> None:
    """Mark a call's failure as seen: a call the watchdog has already failed fails again when the
    killed process's pool breaks, and nobody awaits it any more."""
    if not result.cancelled():
        result.exception()


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
