"""A connection's budget for changing the hotwords it decodes with (``server.hotword_changes``).

Every new decode list costs a trie build (CPU that holds the GIL while every other session
waits), so a client re-sending large lists could slow everyone (issue 19: another session's ping
p99 went from 1.7 ms to 41.7 ms).  The list that counts is the one decoding uses: the session's
hotwords *and* its wake phrases (:meth:`SessionSettings.decode_hotwords`), so changing only
``wake.phrases`` costs a token as a new ``hotwords`` list does.  A frame whose list equals the one in
force is free; a different one needs a token, taken only once the frame is applied (a frame refused
for any reason, its hotwords failing to prepare included, costs nothing), and a frame over budget is
refused whole with ``rate_limited`` before anything is built.  An engine that cannot bias decoding
builds nothing, so there a change costs nothing.
"""

from __future__ import annotations

from kitt_stt.config.server_config import HotwordChangeBudget
from kitt_stt.hotwords import Hotword
from kitt_stt.pipeline.rate_limit import TokenBucket
from kitt_stt.protocol.errors import ErrorCode, ProtocolError


class HotwordChanges:
    def __init__(self, budget: HotwordChangeBudget, hotwords: list[str], decoding: tuple[Hotword, ...],
                 biased: bool) -> None:
        self._budget = budget
        self._biased = biased  # the engine builds something for a new list
        self._bucket = TokenBucket(budget.burst, budget.per_s)
        self._given = tuple(hotwords)  # the client's list as written, to skip parsing it again
        self._in_force = decoding

    def given(self, hotwords: list[str] | None) -> list[str] | None:
        """The hotwords a frame gives, or None when it leaves them (absent, or the list in force as
        written: not even parsed again)."""
        return None if hotwords is None or tuple(hotwords) == self._given else hotwords

    def charge(self, decoding: tuple[Hotword, ...]) -> bool:
        """Whether a validated frame's decode list must be built (it differs from the one in force,
        on an engine that biases decoding); refused (``rate_limited``) beyond the budget. Takes no
        token yet: :meth:`applied` does, so a frame refused after this check costs nothing."""
        if not self._biased or decoding == self._in_force:
            return False
        if not self._bucket.available(1.0):
            budget = self._budget
            raise ProtocolError(ErrorCode.RATE_LIMITED,
                                f"hotwords (wake phrases included) may change {budget.burst} times at once, "
                                f"then once every {1.0 / budget.per_s:g} s (server.hotword_changes); "
                                "this frame was not applied")
        return True

    def applied(self, hotwords: list[str] | None, decoding: tuple[Hotword, ...]) -> None:
        """The frame's settings are in force now: a change :meth:`charge` let through takes its
        token (frames are handled one at a time, so the token checked is still there)."""
        if self._biased and decoding != self._in_force:
            self._bucket.allow(1.0)
        if hotwords is not None:
            self._given = tuple(hotwords)
        self._in_force = decoding
