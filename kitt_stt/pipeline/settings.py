"""Session settings a client may set with ``start`` and change with ``configure``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from kitt_stt.asr.engine import DecodeOptions
from kitt_stt.asr.language import DEFAULT_MIN_SAMPLES, DEFAULT_SWITCH_MARGIN, TurnLanguage
from kitt_stt.hotwords import Hotword
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.text import TextStage, wake_hotwords


@dataclass(frozen=True)
class SessionSettings:
    language: str = "auto"
    use_itn: bool = True
    interim: bool = True
    hotwords: tuple[Hotword, ...] = ()
    eager: bool = False  # send turn_eager / turn_resumed
    stage: TextStage = field(default_factory=TextStage)  # wake phrases, script, ITN (kitt_stt/text)
    languages: tuple[str, ...] = ()  # what "auto" may detect (asr.auto_languages, or the session's own)
    switch_margin: float = DEFAULT_SWITCH_MARGIN  # asr.language_switch_margin
    # a segment decides its language once it has this much audio: vad.preroll_ms plus the speech the
    # language step reads (asr.whisper.language_window_ms)
    decide_samples: int = DEFAULT_MIN_SAMPLES
    words: bool = False  # final.words and confidence (asr.words, or the session's own)
    turn_ends: bool = False  # filtered (empty, wake_only) for turns that end without a commit
    bleed: bool = False  # send `bleed` frames for segments seat arbitration drops (vad.bleed_events)
    arbitration: bool = True  # seat arbitration for this session (vad.arbitration): a rig streaming copies opts out

    def updated(self, *, language: str | None = None, interim: bool | None = None,
                hotwords: tuple[Hotword, ...] | None = None, eager: bool | None = None,
                stage: TextStage | None = None, languages: tuple[str, ...] | None = None,
                words: bool | None = None, turn_ends: bool | None = None, bleed: bool | None = None,
                arbitration: bool | None = None) -> SessionSettings:
        return replace(
            self,
            language=self.language if language is None else language,
            languages=self.languages if languages is None else languages,
            interim=self.interim if interim is None else interim,
            hotwords=self.hotwords if hotwords is None else hotwords,
            eager=self.eager if eager is None else eager,
            stage=self.stage if stage is None else stage,
            words=self.words if words is None else words,
            turn_ends=self.turn_ends if turn_ends is None else turn_ends,
            bleed=self.bleed if bleed is None else bleed,
            arbitration=self.arbitration if arbitration is None else arbitration,
        )

    def decode_hotwords(self) -> tuple[Hotword, ...]:
        """The session's hotwords and its wake phrases (biasing decoding towards them helps them be
        heard; the session's own entry for a phrase wins)."""
        return wake_hotwords(self.stage.wake_settings, self.hotwords)

    def decode_options(self, turn_language: TurnLanguage | None = None,
                       segment_audio: Callable[[], np.ndarray] | None = None) -> DecodeOptions:
        """Options for a segment; with ``turn_language`` (its turn's) an "auto" segment detects
        its language once, on ``segment_audio`` (its audio so far), and the turn keeps it
        (``asr/language.py``)."""
        segment_language = (turn_language.segment(self.switch_margin, self.decide_samples, audio=segment_audio,
                                                  allowed=self.languages)
                            if turn_language is not None and self.language == "auto" else None)
        return DecodeOptions(language=self.language, use_itn=self.use_itn, hotwords=self.decode_hotwords(),
                             languages=self.languages, segment_language=segment_language, words=self.words)


def auto_languages(configured: list[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
    """What "auto" chooses from by default: ``asr.auto_languages`` within the server's languages
    (``allowed``), or, when none of them is, every allowed language."""
    choices = tuple(code for code in allowed if code != "auto")
    return tuple(code for code in dict.fromkeys(configured) if code in choices) or choices


def checked_languages(requested: list[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A session's ``languages`` for "auto": a non-empty subset of the server's languages
    (``allowed`` less "auto"), without repeats; anything else is ``bad_field``."""
    choices = [code for code in allowed if code != "auto"]
    problem = None
    if not requested:
        problem = "must name at least one language"
    elif unknown := [code for code in requested if code not in choices]:
        problem = f"{', '.join(map(repr, unknown))} not allowed by this server"
    elif len(set(requested)) != len(requested):
        problem = "names a language twice"
    if problem is not None:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"languages {problem}; use some of {', '.join(choices)}")
    return tuple(requested)
