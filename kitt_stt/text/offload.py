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
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from kitt_stt.text.itn import ItnParams, WetextNormalizer, has_number
from kitt_stt.text.language import TextLanguage

log = logging.getLogger(__name__)


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
    """One worker process with the ITN grammars loaded; started on first use or by :meth:`start`."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_worker)
            return self._pool

    def start(self) -> None:
        """Blocking: spawn the process and wait until its grammars are loaded (start-up warm-up)."""
        self._executor().submit(_normalize, "一", str(TextLanguage.ZH), ItnParams()).result()

    async def normalize(self, text: str, language: TextLanguage, params: ItnParams | None = None) -> str:
        """``text`` through :class:`WetextNormalizer` in the worker; a text the grammars cannot
        change (no numeral, no number word: most commands) does not leave the loop."""
        if not has_number(text, language):
            return text
        pool = self._executor()
        try:
            return await asyncio.wrap_future(pool.submit(_normalize, text, str(language), params or ItnParams()))
        except BrokenProcessPool:
            # the process died (killed, out of memory): the next call gets a new one; this text's
            # caller decides what to send (the seat sends it as recognised)
            log.error("the ITN worker process died; starting a new one for the next text")
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False)
            raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


_shared = ItnWorker()


def shared_worker() -> ItnWorker:
    """The process-wide worker every :class:`~kitt_stt.text.stage.TextStage` sends its ITN to."""
    return _shared
