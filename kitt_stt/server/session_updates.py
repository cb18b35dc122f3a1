"""A session's settings and how ``start``/``configure`` change them.

A frame's fields are checked against what the engine can do (its languages, whether it biases
decoding) and the connection's hotword change budget before anything is applied: a frame that
fails any check is refused whole with ``bad_field`` or ``rate_limited`` and the settings in force
stay as they were. New hotwords are built on a thread before the settings switch, so no decode
worker pays for the build and the event loop does not block on it.
"""

from __future__ import annotations

import asyncio
import logging

from kitt_stt.asr.engine import AsrEngine
from kitt_stt.config.schema import AppConfig
from kitt_stt.hotwords import Hotword, parse_hotwords
from kitt_stt.pipeline.settings import SessionSettings, auto_languages, checked_languages
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import ConfigureFrame, StartFrame
from kitt_stt.quote import quoted
from kitt_stt.server.hotword_changes import HotwordChanges
from kitt_stt.server.stage_updates import updated_stage
from kitt_stt.text import TextStage

log = logging.getLogger(__name__)


class SessionUpdates:
    def __init__(self, config: AppConfig, engine: AsrEngine, session_id: str) -> None:
        asr = config.asr
        self._engine = engine
        self._session_id = session_id
        self.current = SessionSettings(
            language=asr.language, use_itn=asr.use_itn, interim=config.interim.enabled,
            hotwords=parse_hotwords(asr.hotwords), eager=config.turn.eager_events,
            stage=TextStage(config.text, config.wake), switch_margin=asr.language_switch_margin,
            decide_samples=(config.vad.preroll_ms + asr.whisper.language_window_ms) * 16,
            languages=auto_languages(asr.auto_languages, engine.info.languages),
            words=self._timed(asr.words), bleed=config.vad.bleed_events, arbitration=config.vad.arbitration,
        )
        self._hotword_changes = HotwordChanges(config.server.hotword_changes, asr.hotwords,
                                               self.current.decode_hotwords(), biased=engine.info.hotwords)

    def _timed(self, asked: bool) -> bool:
        """Words only where the engine times them: the final then carries them, and a wake phrase in
        an interim waits for them (``final_words.holds_wake``) only where they can come."""
        return asked and self._engine.info.words

    async def apply(self, frame: StartFrame | ConfigureFrame) -> None:
        """Validate the frame's fields as one change, build its hotwords, then switch to it."""
        given = self._hotword_changes.given(frame.hotwords)
        settings = self._updated(frame.language, frame.interim, given, frame.eager)
        if frame.wake is not None or frame.text is not None:
            settings = settings.updated(stage=updated_stage(self.current.stage, frame.wake, frame.text))
        if frame.languages is not None:
            settings = settings.updated(languages=checked_languages(frame.languages, self._engine.info.languages))
        settings = settings.updated(words=None if frame.words is None else self._timed(frame.words),
                                    turn_ends=frame.turn_ends, bleed=frame.bleed, arbitration=frame.arbitration)
        decoding = settings.decode_hotwords()  # wake phrases are hotwords too: charged once the frame is applied
        if self._hotword_changes.charge(decoding) and decoding:
            await self._prepare_hotwords(decoding)
        self.current = settings
        self._hotword_changes.applied(given, decoding)

    async def _prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        try:
            await asyncio.to_thread(self._engine.prepare_hotwords, hotwords)
        except Exception as exc:
            log.exception("session %s: preparing hotwords failed", self._session_id)
            raise ProtocolError(ErrorCode.BAD_FIELD, f"hotwords could not be prepared: {quoted(str(exc))}") from None

    def _updated(self, language: str | None, interim: bool | None, hotwords: list[str] | None,
                 eager: bool | None) -> SessionSettings:
        languages = self._engine.info.languages
        if language is not None and language not in languages:
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"language {quoted(language)} is not supported by this model; "
                                f"use one of {', '.join(languages)}")
        parsed = None
        if hotwords and not self._engine.info.hotwords:
            log.info("session %s: hotwords accepted but not applied (the %s engine cannot bias decoding)",
                     self._session_id, self._engine.info.kind)
        if hotwords is not None:
            try:
                parsed = parse_hotwords(hotwords)
            except ValueError as exc:
                raise ProtocolError(ErrorCode.BAD_FIELD, f"hotwords: {exc}") from None
        return self.current.updated(language=language, interim=interim, hotwords=parsed, eager=eager)
