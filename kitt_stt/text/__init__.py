"""The text stage: what happens to recognised text before it goes on the wire (``docs/text.md``).

One module per step, each behind its own interface, composed by :class:`TextStage`:

- :mod:`.script` (:class:`ScriptConverter`): Chinese into simplified or traditional characters,
  phrase by phrase (OpenCC).
- :mod:`.wake` (:class:`WakeDetector`): a configured wake phrase at the start of a text, found by
  sound (pinyin, words) despite misrecognitions, and cut off with the punctuation after it.
- :mod:`.itn` (:class:`InverseNormalizer`): numbers, times, measures and percentages as digits
  (WeTextProcessing's grammars through wetext), with :mod:`.itn_style` keeping the speaker's
  unit words; :mod:`.offload` (:class:`ItnWorker`) runs it in a worker process for the service,
  off the event loop.
- :mod:`.stage` (:class:`TextStage`): the steps for interims (cheap ones) and for finals and
  commits (all); :mod:`.gate` (:class:`WakeGate`): which turns are committed, by their wake phrase.
- :mod:`.tokens` and :mod:`.language`: the sound tokens the wake matcher compares, and which
  language a text is in.
"""

from kitt_stt.text.gate import TurnAction, TurnWake, WakeGate
from kitt_stt.text.itn import InverseNormalizer, ItnParams, WetextNormalizer
from kitt_stt.text.language import TextLanguage, text_language
from kitt_stt.text.offload import ItnWorker
from kitt_stt.text.script import OpenCCConverter, ScriptConverter, ScriptMode
from kitt_stt.text.stage import StagedText, TextSettings, TextStage, load, visible_chars
from kitt_stt.text.wake import (
    PinyinWakeDetector,
    WakeDetector,
    WakeMatch,
    WakeMatchParams,
    WakeMode,
    WakeSettings,
    wake_hotwords,
)

__all__ = [
    "InverseNormalizer",
    "ItnParams",
    "ItnWorker",
    "OpenCCConverter",
    "PinyinWakeDetector",
    "ScriptConverter",
    "ScriptMode",
    "StagedText",
    "TextLanguage",
    "TextSettings",
    "TextStage",
    "TurnAction",
    "TurnWake",
    "WakeDetector",
    "WakeGate",
    "WakeMatch",
    "WakeMatchParams",
    "WakeMode",
    "WakeSettings",
    "WetextNormalizer",
    "load",
    "text_language",
    "visible_chars",
    "wake_hotwords",
]
