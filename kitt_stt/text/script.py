"""Chinese script conversion: simplified or traditional characters, whatever the engine wrote.

Whisper writes traditional characters for Mandarin as often as not ("大開車門"), SenseVoice
simplified ones; a client wants one script.  OpenCC converts phrase by phrase, not character by
character, which is what makes it right where one character maps to several (頭髮 / 發展 are 头发 /
发展, and 头发 back is 頭髮, not 頭發).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

import opencc

from kitt_stt.str_enum import StrEnum
from kitt_stt.text.tokens import is_han


class ScriptMode(StrEnum):
    """The script Chinese text is given in: ``simplified`` (default), ``traditional``, or ``as_is``
    (as the engine wrote it)."""

    SIMPLIFIED = "simplified"
    TRADITIONAL = "traditional"
    AS_IS = "as_is"


class ScriptConverter(ABC):
    """Converts Chinese text into one script."""

    @abstractmethod
    def convert(self, text: str) -> str:
        """``text`` in this converter's script; characters of other scripts are left alone."""


_OPENCC_CONFIGS = {ScriptMode.SIMPLIFIED: "t2s", ScriptMode.TRADITIONAL: "s2t"}
_loaded: dict[ScriptMode, opencc.OpenCC] = {}
_loading = threading.Lock()


class OpenCCConverter(ScriptConverter):
    """OpenCC's phrase-level conversion: ``t2s`` (to simplified) or ``s2t`` (to traditional).

    The dictionaries load once per process, on first use (``s2t`` takes ~0.1 s), under a lock; a
    loaded OpenCC converter is read-only, so threads share it.
    """

    def __init__(self, script: ScriptMode) -> None:
        if script not in _OPENCC_CONFIGS:
            raise ValueError(f"no conversion into script {script!r}")
        self._script = script

    def convert(self, text: str) -> str:
        # most finals of an English session have no ideograph and skip OpenCC entirely
        return self._converter().convert(text) if any(is_han(char) for char in text) else text

    def _converter(self) -> opencc.OpenCC:
        converter = _loaded.get(self._script)
        if converter is None:
            with _loading:
                converter = _loaded.get(self._script)
                if converter is None:
                    converter = _loaded[self._script] = opencc.OpenCC(_OPENCC_CONFIGS[self._script])
        return converter
