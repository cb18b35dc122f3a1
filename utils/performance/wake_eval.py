"""Wake-phrase handling through a real server: a matrix of settings x fixtures x repeats.

Like the older service's test matrix (continuous wake, English wake, active filtering), each
cell streams a scripted conversation over a real WebSocket in real time and checks what the
server decided, turn by turn: committed or filtered, woken or not, follow-up or not, and the
committed text without the wake phrase. Fixtures:

* ``wake+command``: the wake phrase in one breath with a command ("ABC打开车门", "hey kitt open
  the window"): one commit, woken, the command's text;
* ``wake, then command``: the wake phrase alone, a pause that ends the turn, then the command:
  no commit for the wake phrase, then a woken follow-up commit;
* ``not addressed``: speech without the wake phrase: ``filtered`` in required mode, a commit
  with ``woken: false`` in detect mode;
* ``follow-up``: a woken command, then a second command without the wake phrase within
  ``follow_up_ms``: both committed, the second as a follow-up.

Settings: the tone model (the tone language, wake phrase ``ABC``: exact by construction) and
whisper-base on espeak-ng English (wake phrase ``hey kitt``: real recognition errors), each in
``detect`` and ``required`` mode. Printed per setting: passes, false wakes (woken where no wake
phrase was said) and missed wakes (not woken where one was), and the failures with what came back.

    python utils/performance/wake_eval.py --repeats 5
    python utils/performance/wake_eval.py --settings tone-required --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.client.session import connect  # noqa: E402
from tests.helpers import run_server, send_pcm, tone_pcm  # noqa: E402
from utils.performance.speech import espeak  # noqa: E402

TURN_WAIT_MS = 800  # silence that ends a turn (no end-of-turn model: decisions are deterministic)
PAUSE_MS = 1800  # silence after each utterance: longer than the turn wait, so each is its own turn


@dataclass(frozen=True)
class Expect:
    """What the server should decide for one utterance: ``None`` (no commit, no filtered: the wake
    phrase alone), or the frame type with its text, woken and follow-up flags."""

    kind: str | None
    text: str = ""
    woken: bool = False
    follow_up: bool = False


@dataclass(frozen=True)
class Fixture:
    name: str
    utterances: tuple[str, ...]  # texts to speak, in order, each followed by PAUSE_MS of silence
    expect: tuple[Expect, ...]  # one per decided turn, in order (wake-only turns decide nothing)
    wake_said: tuple[bool, ...]  # per decided turn: whether a wake phrase was said in it


@dataclass
class Cell:
    setting: str
    fixture: str
    passed: int = 0  # every decision and every text right
    decided_right: int = 0  # every decision right (commit or filtered, woken, follow-up), texts aside
    runs: int = 0
    false_wakes: int = 0
    missed_wakes: int = 0
    failures: list[str] = field(default_factory=list)


def fixtures(wake: str, command: str, second: str, chatter: str, required: bool) -> list[Fixture]:
    """The four fixtures for a wake phrase, two commands and a remark not meant for the assistant."""
    not_addressed = Expect("filtered", chatter) if required else Expect("commit", chatter)
    return [
        Fixture("wake+command", (f"{wake} {command}",), (Expect("commit", command, True),), (True,)),
        Fixture("wake, then command", (wake, command), (Expect("commit", command, True, True),), (False,)),
        Fixture("not addressed", (chatter,), (not_addressed,), (False,)),
        Fixture("follow-up", (f"{wake} {command}", second),
                (Expect("commit", command, True), Expect("commit", second, True, True)), (True, False)),
    ]


class Voice:
    """Audio for a text: the tone synthesizer, or espeak-ng English (16 kHz via sox)."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind, self.work = kind, work

    def pcm(self, text: str) -> bytes:
        if self.kind == "tone":
            return tone_pcm(text.replace(" ", ""), lead_ms=300, tail_ms=0)
        samples = espeak(text, "en-us", self.work, "-s", "160")
        return np.concatenate([np.zeros(4800, np.int16), samples]).astype("<i2").tobytes()


SETTINGS: dict[str, dict[str, Any]] = {
    "tone-detect": {"model": "tone", "voice": "tone", "mode": "detect", "phrase": "ABC",
                    "texts": ("打开车门", "关窗", "车门车门")},
    "tone-required": {"model": "tone", "voice": "tone", "mode": "required", "phrase": "ABC",
                      "texts": ("打开车门", "关窗", "车门车门")},
    "whisper-en-detect": {"model": "whisper-base", "voice": "espeak", "mode": "detect", "phrase": "hey kitt",
                          "texts": ("open the window", "turn on the radio", "we should stop for lunch soon")},
    "whisper-en-required": {"model": "whisper-base", "voice": "espeak", "mode": "required", "phrase": "hey kitt",
                            "texts": ("open the window", "turn on the radio", "we should stop for lunch soon")},
}


def normalised(text: str) -> str:
    return "".join(char for char in text.lower() if char.isalnum())


async def run_fixture(url: str, wake: dict[str, Any], language: str, voice: Voice,
                      fixture: Fixture) -> list[dict[str, Any]]:
    """Speak the fixture's utterances in real time on a connection of its own; return the decided
    turns' frames (commit or filtered)."""
    decided: list[dict[str, Any]] = []
    done = asyncio.Event()
    async with connect(url) as session:
        await session.start(wake=wake, language=language)

        async def receive() -> None:
            async for frame in session.frames():
                if frame["type"] in ("commit", "filtered"):
                    decided.append(frame)
                    if len(decided) == len(fixture.expect):
                        done.set()

        receiver = asyncio.create_task(receive())
        pcm = b"".join(voice.pcm(text) + bytes(32 * PAUSE_MS) for text in fixture.utterances)
        await send_pcm(session, pcm, realtime_factor=1.0)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=15)
        receiver.cancel()
    return decided


def judge(fixture: Fixture, decided: list[dict[str, Any]], cell: Cell, exact: bool) -> None:
    """Count the run: pass, false wakes, missed wakes; note what failed."""
    cell.runs += 1
    problems = []
    if len(decided) != len(fixture.expect):
        problems.append(f"{len(decided)} turns decided, expected {len(fixture.expect)}")
    for got, expect, wake_said in zip(decided, fixture.expect, fixture.wake_said, strict=False):
        woken = got["type"] == "commit" and got["metadata"].get("wake", {}).get("woken", False)
        if woken and not expect.woken:
            cell.false_wakes += 1
        if expect.woken and not woken and (wake_said or expect.follow_up):
            cell.missed_wakes += 1
        follow_up = got["type"] == "commit" and got["metadata"].get("wake", {}).get("follow_up", False)
        text_ok = got["text"] == expect.text if exact else normalised(got["text"]) == normalised(expect.text)
        if got["type"] != expect.kind or woken != expect.woken or follow_up != expect.follow_up or not text_ok:
            problems.append(f"{got['type']} {got['text']!r} woken={woken} follow_up={follow_up}; expected "
                            f"{expect.kind} {expect.text!r} woken={expect.woken} follow_up={expect.follow_up}")
    decisions = [(got["type"], got["type"] == "commit" and got["metadata"].get("wake", {}).get("woken", False),
                  got["type"] == "commit" and got["metadata"].get("wake", {}).get("follow_up", False))
                 for got in decided]
    if decisions == [(expect.kind, expect.woken, expect.follow_up) for expect in fixture.expect]:
        cell.decided_right += 1
    if problems:
        cell.failures.append("; ".join(problems))
    else:
        cell.passed += 1


async def evaluate(name: str, setting: dict[str, Any], cache: Path, work: Path, repeats: int) -> list[Cell]:
    wake = {"phrases": [setting["phrase"]], "mode": setting["mode"], "follow_up_ms": 8000}
    overrides = {"asr": {"model": setting["model"]}, "turn": {"model": None, "wait_ms": TURN_WAIT_MS},
                 "interim": {"enabled": True}, "server": {"max_seats": 16}}
    command, second, chatter = setting["texts"]
    voice = Voice(setting["voice"], work)
    cells = []
    with run_server(work, cache, overrides) as server:
        for fixture in fixtures(setting["phrase"], command, second, chatter, setting["mode"] == "required"):
            cell = Cell(name, fixture.name)
            language = "en" if setting["voice"] == "espeak" else "auto"
            runs = await asyncio.gather(*(run_fixture(server.url, wake, language, voice, fixture)
                                          for _ in range(repeats)))  # the repeats at once
            for decided in runs:
                judge(fixture, decided, cell, exact=setting["model"] == "tone")
            print(f"  {name} / {fixture.name}: {cell.passed}/{cell.runs}", file=sys.stderr, flush=True)
            cells.append(cell)
    return cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--english-phrase", default="hey kitt", help="the wake phrase of the whisper settings")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: user cache dir)")
    args = parser.parse_args()
    from kitt_stt.models.registry import default_cache_dir

    cache = args.cache or default_cache_dir()
    for name in SETTINGS:
        if SETTINGS[name]["voice"] == "espeak":
            SETTINGS[name]["phrase"] = args.english_phrase
    if any(SETTINGS[name]["voice"] == "espeak" for name in args.settings) and not (
            shutil.which("espeak-ng") and shutil.which("sox")):
        print("espeak-ng and sox are needed for the whisper settings: apt-get install espeak-ng sox", file=sys.stderr)
        return 2
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="wake-eval-") as tmp:
        for name in args.settings:
            cells += asyncio.run(evaluate(name, SETTINGS[name], cache, Path(tmp), args.repeats))
    print("| setting | fixture | passed (decisions and texts) | decisions right | false wakes | missed wakes |")
    print("|---|---|---|---|---|---|")
    for cell in cells:
        print(f"| {cell.setting} | {cell.fixture} | {cell.passed}/{cell.runs} | {cell.decided_right}/{cell.runs} | "
              f"{cell.false_wakes} | {cell.missed_wakes} |")
    print()
    for name in args.settings:
        mine = [cell for cell in cells if cell.setting == name]
        runs = sum(c.runs for c in mine)
        print(f"{name} ({SETTINGS[name]['phrase']!r}): {sum(c.passed for c in mine)}/{runs} passed, "
              f"{sum(c.decided_right for c in mine)} decided right, {sum(c.false_wakes for c in mine)} false wakes, "
              f"{sum(c.missed_wakes for c in mine)} missed wakes")
    failures = [(cell, failure) for cell in cells for failure in cell.failures]
    if failures:
        print("\nfailures:")
        for cell, failure in failures:
            print(f"- {cell.setting} / {cell.fixture}: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
