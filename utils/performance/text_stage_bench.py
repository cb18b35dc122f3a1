"""What the text stage costs per text: the cheap steps (interims) and all steps (finals, commits).

Warm: the mean over representative in-car texts (Mandarin and English, with and without a wake
phrase, numbers or none, traditional characters from Whisper), best of ``--repeats`` passes, for
the usual wake configuration (two phrases) and the largest one allowed (16 phrases of 32
characters).  Cold: in a fresh process, what :func:`kitt_stt.text.stage.load` costs at start-up,
and the first text through a new stage with and without it.  The target (issue 14) is under 1 ms a final for the cheap
steps; numbers are in ``docs/text.md``::

    python utils/performance/text_stage_bench.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.text.script import ScriptMode  # noqa: E402
from kitt_stt.text.stage import TextSettings, TextStage  # noqa: E402
from kitt_stt.text.wake import MAX_WAKE_PHRASE_CHARS, MAX_WAKE_PHRASES, WakeMode, WakeSettings  # noqa: E402

#: (text, language the engine reported)
TEXTS = (
    ("你好小凯打开车门", "zh"),
    ("你好小凯，空调调到二十六度", "zh"),
    ("打开车窗", "zh"),
    ("大開車門", "zh"),
    ("导航到最近的加油站然后播放周杰伦的歌", "zh"),
    ("hey kitt, set the temperature to twenty six degrees", "en"),
    ("Hey Kit, open the window.", "en"),
    ("open the window please", "en"),
)
USUAL = ("你好小凯", "hey kitt")
LARGEST = tuple(f"{index:02d}" + "你好小凯" * 7 + "小凯"[: MAX_WAKE_PHRASE_CHARS - 30]
                for index in range(MAX_WAKE_PHRASES))


def stage(phrases: tuple[str, ...], script: ScriptMode = ScriptMode.SIMPLIFIED) -> TextStage:
    return TextStage(TextSettings(script=script), WakeSettings(phrases=phrases, mode=WakeMode.DETECT))


def warm_us(text_stage: TextStage, path: str, repeats: int) -> float:
    """Mean µs per text over :data:`TEXTS`, best of ``repeats`` passes."""
    call = text_stage.interim if path == "interim" else text_stage.final
    for text, lang in TEXTS:
        call(text, lang)
    passes = []
    for _ in range(repeats):
        start = time.perf_counter()
        for text, lang in TEXTS:
            call(text, lang)
        passes.append((time.perf_counter() - start) / len(TEXTS) * 1e6)
    return min(passes)


def cold_ms(path: str, preload: bool) -> tuple[float, float]:
    """A fresh interpreter: (import and maybe :func:`load`, then the first text through a new
    stage), in ms."""
    code = (
        "import time; start = time.perf_counter()\n"
        "from kitt_stt.text import stage as s\n"
        f"{'s.load()' if preload else ''}\n"
        "ready = time.perf_counter()\n"
        "t = s.TextStage(wake=s.WakeSettings(phrases=('你好小凯', 'hey kitt'), mode='detect'))\n"
        f"t.{path}('你好小凯，空调调到二十六度', 'zh')\n"
        "print((ready - start) * 1000, (time.perf_counter() - ready) * 1000)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    setup, first = result.stdout.strip().splitlines()[-1].split()
    return float(setup), float(first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = {}
    for label, phrases in (("2 phrases", USUAL), (f"{MAX_WAKE_PHRASES} phrases of {MAX_WAKE_PHRASE_CHARS}", LARGEST)):
        for path in ("interim", "final"):
            rows[f"warm {path} µs, {label}"] = warm_us(stage(phrases), path, args.repeats)
    rows["warm final µs, 2 phrases, traditional"] = warm_us(stage(USUAL, ScriptMode.TRADITIONAL), "final", args.repeats)
    rows["start-up: import and load() ms"] = cold_ms("final", preload=True)[0]
    for path in ("interim", "final"):
        rows[f"first {path} ms, nothing loaded"] = cold_ms(path, preload=False)[1]
        rows[f"first {path} ms, after load()"] = cold_ms(path, preload=True)[1]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    print("| measure | value |\n|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
