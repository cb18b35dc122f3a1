"""How long the text stage stalls the event loop, per way of running ITN, side by side.

A probe task on the loop asks to wake every millisecond and records how late it woke: the
longest lateness is the longest stall every session on the loop felt. Meanwhile the loop runs
finals of growing Mandarin texts full of number words (the grammars' cost grows with the text)
through :class:`~kitt_stt.text.stage.TextStage`, one way per column:

* ``idle``: nothing runs (the probe's own noise on this machine);
* ``inline``: ``stage.final`` on the loop (the code before issue 19);
* ``thread``: ``stage.final`` on a worker thread (``asyncio.to_thread``): kaldifst holds the GIL;
* ``split``: the text cut at its commas, each piece inline with a yield between (only possible
  where the text has punctuation: ``split, no commas`` is the same text without);
* ``process``: ``stage.final_off_loop`` (ITN in the worker process; what the service does).

Each final runs in its own probe window, the ways interleaved final by final so that the
machine's own noise (``idle``) falls on all alike; printed: the median and the longest stall,
the loop thread's CPU time per final (``time.thread_time``, measured on a second run without the
probe: what the loop itself spent, whatever else the machine did), and the time a final takes end
to end (what its own seat waits)::

    python utils/performance/text_loop_lag.py            # --repeats 10 --sizes 20 80 160 320
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.text.offload import shared_worker  # noqa: E402
from kitt_stt.text.stage import StagedText, TextStage  # noqa: E402

PHRASE = "空调调到二十六度，导航到三公里外的第二个加油站，"  # 24 characters, three number words
PROBE_INTERVAL_S = 0.001


def mandarin(chars: int, commas: bool = True) -> str:
    text = (PHRASE * (chars // len(PHRASE) + 1))[:chars]
    return text if commas else text.replace("，", "的")


class LagProbe:
    """Wakes every ``PROBE_INTERVAL_S``; ``longest_ms`` is the most it was ever late."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.longest_ms = max(self.longest_ms, (time.perf_counter() - asked - PROBE_INTERVAL_S) * 1000.0)

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0.01)  # running, and its first wake-ups are behind it
        self.longest_ms = 0.0
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.005)  # the probe wakes once more after the last call
        assert self._task is not None
        self._task.cancel()


def ways(stage: TextStage) -> dict[str, Callable[[str], Awaitable[StagedText]]]:
    async def idle(text: str) -> StagedText:
        await asyncio.sleep(0.02)
        return StagedText(text)

    async def inline(text: str) -> StagedText:
        return stage.final(text, "zh")

    async def thread(text: str) -> StagedText:
        return await asyncio.to_thread(stage.final, text, "zh")

    async def split(text: str) -> StagedText:
        pieces = []
        for piece in text.split("，"):
            pieces.append(stage.final(piece, "zh").text)
            await asyncio.sleep(0)
        return StagedText("，".join(pieces))

    async def process(text: str) -> StagedText:
        return await stage.final_off_loop(text, "zh")

    return {"idle": idle, "inline": inline, "thread": thread, "split": split, "process": process}


async def one_final(way: Callable[[str], Awaitable[StagedText]], text: str) -> tuple[float, float, float]:
    """(longest stall ms and ms it took, in a probe window; loop-thread CPU ms, without the probe,
    whose own wake-ups would count)."""
    async with LagProbe() as probe:
        started = time.perf_counter()
        await way(text)
        took = (time.perf_counter() - started) * 1000.0
    cpu = time.thread_time()
    await way(text)
    return probe.longest_ms, took, (time.thread_time() - cpu) * 1000.0


async def run(sizes: list[int], repeats: int) -> list[tuple[str, dict[str, list[tuple[float, float, float]]]]]:
    """Ways interleaved final by final, so the machine's own noise falls on each alike."""
    stage = TextStage()
    every = ways(stage)
    stage.final(mandarin(24), "zh")  # grammars loaded here (inline, thread, split)
    await asyncio.to_thread(shared_worker().start)  # and in the worker process
    rows = []
    for chars in sizes:
        for commas in (True, False):
            text = mandarin(chars, commas)
            names = [n for n in every if commas or n in ("inline", "split", "process")]
            samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
            for _ in range(repeats):
                for name in names:
                    samples[name].append(await one_final(every[name], text))
            rows.append((f"{chars} chars" + ("" if commas else ", no commas"), samples))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 80, 160, 320])
    args = parser.parse_args(argv)
    rows = asyncio.run(run(args.sizes, args.repeats))
    names = ["idle", "inline", "thread", "split", "process"]
    print(f"longest loop stall ms per final, median / max of {args.repeats} (ways interleaved)\n")
    print("| text | " + " | ".join(names) + " | max stall inline / process | loop CPU ms inline / process |")
    print("|---|" + "---|" * (len(names) + 2))
    for label, samples in rows:
        cells = []
        for name in names:
            stalls = [stall for stall, _, _ in samples.get(name, [])]
            cells.append(f"{statistics.median(stalls):.1f} / {max(stalls):.1f}" if stalls else "—")
        worst = {name: max(stall for stall, _, _ in samples[name]) for name in ("inline", "process")}
        cpu = {name: statistics.median(c for _, _, c in samples[name]) for name in ("inline", "process")}
        print(f"| {label} | " + " | ".join(cells) + f" | {worst['inline'] / max(worst['process'], 1e-3):.1f}x"
              f" | {cpu['inline']:.1f} / {cpu['process']:.2f} |")
    print("\nmedian ms a final took (its own seat waits this long):")
    for label, samples in rows:
        took = {name: statistics.median(t for _, t, _ in samples[name]) for name in samples if name != "idle"}
        print(f"  {label}: " + ", ".join(f"{name} {ms:.1f}" for name, ms in took.items()))
    shared_worker().close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
