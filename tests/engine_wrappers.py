"""Real engines with one thing changed, for tests: every decode slower (a loaded accelerator), the
tone model's words written as Mandarin or English number words (as Whisper writes them, for ITN),
a hotword list that cannot be prepared, or a longest input of 2 s (Whisper's is 29.5 s). Used in
a pipeline directly, or in a real server through :func:`serve_with` (tests/slow_decode_server.py,
tests/number_words_server.py, tests/english_numbers_server.py, tests/failing_hotwords_server.py,
tests/short_input_server.py)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence

from kitt_stt.asr import factory
from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, StageTimer
from kitt_stt.asr.features import FeatureStream
from kitt_stt.hotwords import Hotword

DECODE_DELAY_S = 0.15
UNPREPARABLE = "boom"  #: a hotword FailingHotwords cannot prepare
#: what the tone engine hears -> what NumberWords writes (160 characters of number words, and a short one)
NUMBER_WORDS = {"打开车门": "空调调到二十六度" * 20, "关窗": "音量调到百分之三十"}


class WrappedEngine(AsrEngine):
    def __init__(self, inner: AsrEngine) -> None:
        self.inner = inner
        self.info = inner.info

    def new_feature_stream(self) -> FeatureStream | None:
        return self.inner.new_feature_stream()


class SlowDecodes(WrappedEngine):
    """Every decode batch ``DECODE_DELAY_S`` slower."""

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        time.sleep(DECODE_DELAY_S)
        return self.inner.decode_batch(requests, timer)


class FailingHotwords(WrappedEngine):
    """Preparing a list that holds :data:`UNPREPARABLE` raises (a trie build that fails)."""

    def prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        if any(hotword.text == UNPREPARABLE for hotword in hotwords):
            raise RuntimeError("this hotword list cannot be prepared")
        self.inner.prepare_hotwords(hotwords)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        return self.inner.decode_batch(requests, timer)


class NumberWords(WrappedEngine):
    """The tone engine's texts rewritten by :data:`NUMBER_WORDS`, in Mandarin."""

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        return [AsrResult(text=NUMBER_WORDS.get(result.text, result.text), lang="zh")
                for result in self.inner.decode_batch(requests, timer)]


#: what the tone engine hears -> what EnglishNumbers writes: issue 33's spaced and misread examples
ENGLISH_NUMBERS = {"打开车门": "Leave at ten forty five!", "关车窗": "It is twenty percent."}


class EnglishNumbers(WrappedEngine):
    """The tone engine's texts rewritten by :data:`ENGLISH_NUMBERS`, in English, as Whisper writes
    a sentence (capital, punctuation, numbers as words)."""

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        return [AsrResult(text=ENGLISH_NUMBERS.get(result.text, result.text), lang="en")
                for result in self.inner.decode_batch(requests, timer)]


SHORT_INPUT_MS = 2000  #: what ShortInput reads of a decode


class ShortInput(WrappedEngine):
    """Reads only the first :data:`SHORT_INPUT_MS` of a decode and says so in its info, as
    sherpa-onnx's Whisper reads 29.5 s and drops the rest."""

    def __init__(self, inner: AsrEngine) -> None:
        super().__init__(inner)
        self.info = dataclasses.replace(inner.info, longest_input_ms=SHORT_INPUT_MS)

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        clipped = [dataclasses.replace(request, samples=request.samples[: SHORT_INPUT_MS * 16], features=None)
                   for request in requests]
        return self.inner.decode_batch(clipped, timer)


def serve_with(wrapper: Callable[[AsrEngine], AsrEngine]) -> None:
    """Run the real ``kitt-stt`` command line with the engine it builds wrapped."""
    build = factory.EnginePlan.build

    def wrapped_build(plan: factory.EnginePlan) -> AsrEngine:
        return wrapper(build(plan))

    factory.EnginePlan.build = wrapped_build  # type: ignore[method-assign]
    from kitt_stt.cli import main

    sys.exit(main())
