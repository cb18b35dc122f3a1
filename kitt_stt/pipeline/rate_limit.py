"""Per-seat audio budget (a token bucket counted in milliseconds of audio)."""

from __future__ import annotations

import time

from kitt_stt.config.schema import RateLimitConfig


class AudioRateLimiter:
    """Allows ``burst_ms`` of audio at once, refilled at ``realtime_factor`` x wall time."""

    def __init__(self, config: RateLimitConfig) -> None:
        self._capacity = float(config.burst_ms)
        self._rate = config.realtime_factor
        self._tokens = self._capacity
        self._last = time.monotonic()
        self._last_complaint = float("-inf")

    def allow(self, audio_ms: float) -> bool:
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * 1000.0 * self._rate)
        self._last = now
        if audio_ms > self._tokens:
            return False
        self._tokens -= audio_ms
        return True

    def should_complain(self, every_s: float = 1.0) -> bool:
        """At most one ``rate_limited`` error per ``every_s``, so refusals do not flood the socket."""
        now = time.monotonic()
        if now - self._last_complaint < every_s:
            return False
        self._last_complaint = now
        return True
