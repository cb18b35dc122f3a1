"""Token buckets: the per-seat audio budget, the per-seat budget for opening segments, and the
pace at which one connection's messages are read."""

from __future__ import annotations

import time

from kitt_stt.config.server_config import RateLimitConfig, SegmentStartBudget


class Throttle:
    """At most one complaint per ``every_s``, so refusals do not flood the socket with error frames."""

    def __init__(self, every_s: float = 1.0) -> None:
        self._every_s = every_s
        self._last = float("-inf")

    def ready(self) -> bool:
        now = time.monotonic()
        if now - self._last < self._every_s:
            return False
        self._last = now
        return True


class TokenBucket:
    """Allows ``capacity`` at once, refilled at ``refill_per_s``."""

    def __init__(self, capacity: float, refill_per_s: float) -> None:
        self._capacity = capacity
        self._rate = refill_per_s
        self._tokens = capacity
        self._last = time.monotonic()
        self._complaints = Throttle()

    def allow(self, cost: float) -> bool:
        if not self.available(cost):
            return False
        self._tokens -= cost
        return True

    def available(self, cost: float) -> bool:
        """Whether ``cost`` could be taken now, taking nothing: for a cost paid only once the work succeeds."""
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate)
        self._last = now
        return cost <= self._tokens

    def delay_for(self, cost: float) -> float:
        """Take ``cost`` now, going into debt if needed; the seconds to wait until the debt is paid.

        For pacing instead of refusing: the caller sleeps that long before taking more."""
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate) - cost
        self._last = now
        return max(0.0, -self._tokens / self._rate)

    def should_complain(self) -> bool:
        """At most one complaint a second about this bucket."""
        return self._complaints.ready()


class AudioRateLimiter(TokenBucket):
    """Counted in milliseconds of audio: ``burst_ms`` at once, then ``realtime_factor`` x wall time."""

    def __init__(self, config: RateLimitConfig) -> None:
        super().__init__(float(config.burst_ms), config.realtime_factor * 1000.0)


class SegmentStartLimiter(TokenBucket):
    """Counted in segments: ``burst`` at once, then ``per_s`` a second."""

    def __init__(self, config: SegmentStartBudget) -> None:
        super().__init__(float(config.burst), config.per_s)


class MessagePacer(TokenBucket):
    """Messages a connection may have read per second (one second's worth at once)."""

    def __init__(self, per_s: int) -> None:
        super().__init__(float(per_s), float(per_s))
