"""The text stage: the steps every interim, final and commit text goes through before it is sent.

Steps, in order: script conversion (:mod:`.script`), wake-phrase detection and stripping
(:mod:`.wake`), inverse text normalisation (:mod:`.itn`).  Interims get the cheap two (tens of
microseconds); finals and commits all three.  ITN costs a millisecond or more, growing with the
text, and holds the GIL, so the service awaits :meth:`TextStage.final_off_loop`, which runs it in
a worker process (:mod:`.offload`); :meth:`TextStage.final` runs it in the caller (tools,
tests).  Engines still strip their own tags (``kitt_stt/asr/text.py``): SenseVoice's tags
carry the language, emotion and event the engine reports, so they are parsed where they are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict

from kitt_stt.text.itn import WetextNormalizer
from kitt_stt.text.language import TextLanguage, text_language
from kitt_stt.text.offload import shared_worker
from kitt_stt.text.script import OpenCCConverter, ScriptMode
from kitt_stt.text.tokens import tokenize
from kitt_stt.text.wake import PinyinWakeDetector, WakeMatch, WakeMode, WakeSettings


class TextSettings(BaseModel):
    """A session's text settings (``start``/``configure``; defaults under ``text:`` in config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    script: ScriptMode = ScriptMode.SIMPLIFIED
    #: Numbers as digits where the engine did not write them so (Whisper; SenseVoice's own
    #: ``use_itn`` stays).
    itn: bool = True


@dataclass(frozen=True)
class StagedText:
    """A text ready to send: ``text`` without the wake phrase, and the wake phrase found, if any
    (``wake.rest`` is ``text``).

    What a final's words need to follow the text (``pipeline/final_words.py``): ``wake_chars``, how
    many non-space characters of the recognised text the wake match took off its front (counted
    before ITN, which rewrites what follows), and ``itn_changed``, whether ITN rewrote the rest (then
    the words cannot take their characters from ``text`` one for one).
    """

    text: str
    wake: WakeMatch | None = None
    # how it was staged, not what is sent: two texts that send the same are equal
    wake_chars: int = field(default=0, compare=False)
    itn_changed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class _BeforeItn:
    """A final after the cheap steps: ``language`` None when ITN does not apply; ``script`` is the
    one to convert the normalised text (back) into."""

    staged: StagedText
    language: TextLanguage | None
    script: ScriptMode


class TextStage:
    """The steps for one session's settings.  Immutable, so any thread may use it; build a new one
    when ``start``/``configure`` changes the settings (cheap: the wake phrases are tokenised, the
    converters and grammars are shared by the process)."""

    def __init__(self, text: TextSettings | None = None, wake: WakeSettings | None = None) -> None:
        self.text_settings = text or TextSettings()
        self.wake_settings = wake or WakeSettings()
        self._detector = None if self.wake_settings.mode is WakeMode.OFF else PinyinWakeDetector(self.wake_settings)
        self._converters = {script: OpenCCConverter(script)
                            for script in (ScriptMode.SIMPLIFIED, ScriptMode.TRADITIONAL)}
        self._itn = WetextNormalizer()

    def interim(self, text: str, lang: str | None = None, detect_wake: bool = True) -> StagedText:
        """Cheap steps only (script conversion, wake detection and stripping): safe on the event
        loop.  ``lang``: the language the engine reported, if any.  ``detect_wake`` False: the text
        is not at the start of a turn, where alone a wake phrase counts."""
        staged = StagedText(self._convert(text, self._script(text_language(lang, text))))
        return self._wake(staged.text) if detect_wake else staged

    def final(self, text: str, lang: str | None = None, engine_itn: bool = False,
              detect_wake: bool = True) -> StagedText:
        """Every step, for a segment's final text or a turn's joined text before its commit.

        ``engine_itn``: the engine already normalised this text (SenseVoice with ``use_itn``), so
        ITN is skipped.  The Mandarin grammars read simplified characters: a session that wants
        traditional ones gets them converted after ITN.  ITN runs here, in the caller's thread.
        """
        before = self._before_itn(text, lang, engine_itn, detect_wake)
        if before.language is None:
            return before.staged
        return self._after_itn(before, self._itn.normalize(before.staged.text, before.language))

    async def final_off_loop(self, text: str, lang: str | None = None, engine_itn: bool = False,
                             detect_wake: bool = True) -> StagedText:
        """:meth:`final`, with ITN in the worker process, so the event loop goes on meanwhile;
        the cheap steps stay on it (~50 µs for a command, a few ms for a long text with the
        largest wake configuration). When the worker fails this text (it died, hung or raised;
        it logs why), the text goes on without ITN: the cheap steps' result, wake match and all,
        so a woken command is still a woken command."""
        before = self._before_itn(text, lang, engine_itn, detect_wake)
        if before.language is None:
            return before.staged
        try:
            written = await shared_worker().normalize(before.staged.text, before.language, self._itn.params)
        except Exception:
            written = before.staged.text
        return self._after_itn(before, written)

    def _before_itn(self, text: str, lang: str | None, engine_itn: bool, detect_wake: bool) -> _BeforeItn:
        language = text_language(lang, text)
        script = self._script(language)
        normalize = self.text_settings.itn and not engine_itn and language is not None
        working = ScriptMode.SIMPLIFIED if script is ScriptMode.TRADITIONAL and normalize else script
        converted = self._convert(text, working)
        staged = self._wake(converted) if detect_wake else StagedText(converted)
        return _BeforeItn(staged, language if normalize else None, script)

    def _after_itn(self, before: _BeforeItn, written: str) -> StagedText:
        script, staged = before.script, before.staged
        result = self._convert(written, script)
        changed = written != staged.text
        if staged.wake is None:
            return StagedText(result, itn_changed=changed)
        return StagedText(result, replace(staged.wake, heard=self._convert(staged.wake.heard, script), rest=result),
                          wake_chars=staged.wake_chars, itn_changed=changed)

    def _script(self, language: TextLanguage | None) -> ScriptMode:
        return self.text_settings.script if language is TextLanguage.ZH else ScriptMode.AS_IS

    def _convert(self, text: str, script: ScriptMode) -> str:
        converter = self._converters.get(script)
        return text if converter is None else converter.convert(text)

    def _wake(self, text: str) -> StagedText:
        match = None if self._detector is None else self._detector.detect(text)
        if match is None:
            return StagedText(text)
        return StagedText(match.rest, match, wake_chars=len(visible_chars(text)) - len(visible_chars(match.rest)))


def load(itn_worker: bool = False) -> None:
    """Load pypinyin's dictionaries, OpenCC's and the ITN grammars now (~0.45 s, once per
    process), so the first session's first final does not wait for them; for start-up warm-up.
    ``itn_worker``: the grammars are loaded in the worker process (spawned now) that
    :meth:`TextStage.final_off_loop` uses, not in this one."""
    tokenize("预热")
    for script in (ScriptMode.SIMPLIFIED, ScriptMode.TRADITIONAL):
        OpenCCConverter(script).convert("预热")
    if itn_worker:
        shared_worker().start()
    else:
        WetextNormalizer.load()


def visible_chars(text: str) -> list[str]:
    """The characters that are not spaces: what a final's words are counted in, here (the wake's
    share, ``wake_chars``) and where the words are matched to the sent text (``pipeline/final_words``)."""
    return [char for char in text if not char.isspace()]
