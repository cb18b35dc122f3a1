"""A turn of one seat: the segments that belong together, their texts as recognised and as
sent, and the turn through the text stage.

What happens to a turn (when it is decided and committed) is :mod:`.turn_tracker`'s; this is
the record it keeps, and the text rules that depend only on it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from kitt_stt.asr.language import TurnLanguage
from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.text import StagedText, TextStage
from kitt_stt.turnsense.model import TurnPrediction

log = logging.getLogger(__name__)

RESTAGE_MAX_CHARS = 200  # turns up to this long go through the text stage again as one text


@dataclass
class Turn:
    start_ms: int
    segment_ids: list[int] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    pending_finals: int = 0
    end_ms: int = 0
    speech_ended_at: float = 0.0
    prediction: asyncio.Future[TurnPrediction] | None = None
    turn_id: int | None = None  # given when first announced
    eager_sent: bool = False  # a turn_eager went out since speech last resumed
    stage: TextStage = field(default_factory=TextStage)  # the text stage in force when the turn began
    engine_itn: bool = False  # the engine already wrote numbers as digits (SenseVoice use_itn)
    langs: set[str | None] = field(default_factory=set)  # the languages its finals reported
    language: TurnLanguage = field(default_factory=TurnLanguage)  # "auto": what its first segment detected
    staged_finals: dict[int, StagedText] = field(default_factory=dict)  # each final as it was sent
    _staged: tuple[tuple[int, ...], StagedText] | None = field(default=None, repr=False)
    wake_sent: bool = False
    confidences: dict[int, float] = field(default_factory=dict)  # words sessions: each final's confidence
    wake_refused: bool = False  # a final's wake phrase was heard below wake.min_confidence: restaging keeps it out

    def text(self) -> str:
        """The segments' texts as recognised, joined (before the text stage)."""
        return join_texts(self.texts[segment_id] for segment_id in self.segment_ids if segment_id in self.texts)

    def at_start(self, segment_id: int) -> bool:
        """Whether nothing but wake phrases was said in the turn before ``segment_id``: only there
        does a wake phrase count. An earlier segment whose final is still pending may hold words."""
        earlier = [other for other in self.segment_ids if other < segment_id]
        return all(other in self.staged_finals and not self.staged_finals[other].text for other in earlier)

    def staged(self) -> StagedText:
        """The whole turn through the text stage. A one-segment turn is its final as sent (staged
        alike). A short turn is run again as one text, so a wake phrase or a number split by a pause
        ("你好" | "小凯打开", "二十" | "六度") is still found; a long one joins its finals as they were
        sent, because ITN's cost grows with the text and the commit waits for it (``docs/text.md``).
        The result is kept until another final arrives: ``turn_eager`` and the commit share it;
        :meth:`stage_off_loop` makes it ready without running ITN on the event loop. A fault in the
        stage gives the finals as sent, wake and all (it must not cost the turn its commit, nor a
        command its wake)."""
        finals = self._finals()
        if self._staged is not None and self._staged[0] == finals:
            return self._staged[1]
        restage = self._restage(finals)
        try:
            staged = (self.stage.final(*restage, self.engine_itn, detect_wake=not self.wake_refused) if restage
                      else self.as_sent(finals))
        except Exception:
            log.exception("text stage failed on a turn; committing its finals as they were sent")
            staged = self.as_sent(finals)
        self._staged = (finals, staged)
        return staged

    async def stage_off_loop(self) -> None:
        """:meth:`staged`, with ITN in the text stage's worker process: awaited before the turn's
        decision and its flush, so ``turn_eager`` and the commit find it ready. A fault there commits
        the finals as sent, wake and all (it must not cost the turn its commit, nor a command its wake)."""
        finals = self._finals()
        restage = self._restage(finals)
        if restage is None or (self._staged is not None and self._staged[0] == finals):
            return
        try:
            staged = await self.stage.final_off_loop(*restage, self.engine_itn, detect_wake=not self.wake_refused)
        except Exception:
            log.exception("text stage failed on a turn; committing its finals as they were sent")
            staged = self.as_sent(finals)
        self._staged = (finals, staged)

    def _finals(self) -> tuple[int, ...]:
        return tuple(sid for sid in self.segment_ids if sid in self.staged_finals)

    def _restage(self, finals: tuple[int, ...]) -> tuple[str, str | None] | None:
        """The (text, language) to run through the text stage again as one, or None to use the
        finals as they were sent."""
        if len(finals) == 1:
            return None
        text = self.text()
        if len(text) <= RESTAGE_MAX_CHARS:
            lang = next(iter(self.langs)) if len(self.langs) == 1 else None  # mixed: read it from the text
            return text, lang
        return None

    def as_sent(self, finals: tuple[int, ...] | None = None) -> StagedText:
        """The finals (by default all sent so far) joined as sent; the wake match's ``rest`` is that text."""
        sent = [self.staged_finals[sid] for sid in (self._finals() if finals is None else finals)]
        if len(sent) == 1:
            return sent[0]
        text, wake = join_texts(final.text for final in sent), next((f.wake for f in sent if f.wake), None)
        return StagedText(text, None if wake is None else replace(wake, rest=text))
