"""A connection's budget for changing its hotwords (``server.hotword_changes``).

Every new hotword list costs a trie build (CPU that holds the GIL while every other session
waits), so a client re-sending large lists could slow everyone (issue 19: another session's ping
p99 went from 1.7 ms to 41.7 ms).  A list equal to the one in force is free; a different one
takes a token, and a frame over budget is refused whole with ``rate_limited``.
"""

from __future__ import annotations

from kitt_stt.config.schema import HotwordChangeBudget
from kitt_stt.pipeline.rate_limit import TokenBucket
from kitt_stt.protocol.errors import ErrorCode, ProtocolError


class HotwordChanges:
    def __init__(self, budget: HotwordChangeBudget, in_force: list[str]) -> None:
        self._budget = budget
        self._bucket = TokenBucket(budget.burst, budget.per_s)
        self._in_force = tuple(in_force)

    def admit(self, hotwords: list[str] | None) -> list[str] | None:
        """The hotwords a frame changes to, or None when it leaves them (absent, or the list in force:
        not even parsed again); refused (``rate_limited``) beyond the budget."""
        if hotwords is None or tuple(hotwords) == self._in_force:
            return None
        if not self._bucket.allow(1.0):
            budget = self._budget
            raise ProtocolError(ErrorCode.RATE_LIMITED,
                                f"hotwords may change {budget.burst} times at once, then once every "
                                f"{1.0 / budget.per_s:g} s (server.hotword_changes); this frame was not applied")
        return hotwords

    def applied(self, hotwords: list[str] | None) -> None:
        """The frame's settings are in force now."""
        if hotwords is not None:
            self._in_force = tuple(hotwords)
