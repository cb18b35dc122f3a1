"""Session settings a client may set with ``start`` and change with ``configure``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kitt_stt.asr.engine import DecodeOptions
from kitt_stt.hotwords import Hotword
from kitt_stt.text import TextStage, wake_hotwords


@dataclass(frozen=True)
class SessionSettings:
    language: str = "auto"
    use_itn: bool = True
    interim: bool = True
    hotwords: tuple[Hotword, ...] = ()
    eager: bool = False  # send turn_eager / turn_resumed
    stage: TextStage = field(default_factory=TextStage)  # wake phrases, script, ITN (kitt_stt/text)

    def updated(self, *, language: str | None = None, interim: bool | None = None,
                hotwords: tuple[Hotword, ...] | None = None, eager: bool | None = None,
                stage: TextStage | None = None) -> SessionSettings:
        return replace(
            self,
            language=self.language if language is None else language,
            interim=self.interim if interim is None else interim,
            hotwords=self.hotwords if hotwords is None else hotwords,
            eager=self.eager if eager is None else eager,
            stage=self.stage if stage is None else stage,
        )

    def decode_hotwords(self) -> tuple[Hotword, ...]:
        """The session's hotwords and its wake phrases (biasing decoding towards them helps them be
        heard; the session's own entry for a phrase wins)."""
        return wake_hotwords(self.stage.wake_settings, self.hotwords)

    def decode_options(self) -> DecodeOptions:
        return DecodeOptions(language=self.language, use_itn=self.use_itn, hotwords=self.decode_hotwords())
