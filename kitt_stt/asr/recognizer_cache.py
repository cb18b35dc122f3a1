"""A small thread-safe LRU of objects that are expensive to build: per-language recognizers, hotword tries.

Why not ``functools.lru_cache`` or a dict under one lock: building a Whisper recognizer takes 1-2 s
and ~300 MB, and clients choose the keys (session language, hotword lists). A plain dict grows with
every key ever asked for; a lock held while building makes every decode in every language wait for
one session's new language. Here the cache lock guards only bookkeeping: a key being built has a
future that later callers for the same key wait on (so it is built once), while other keys are
served meanwhile. At most ``capacity`` built values are kept; adding one more drops the least
recently used, and dropping the cache's reference frees it once no decode still holds it. So the
memory bound is ``capacity`` values plus those in flight (at most one per concurrent caller).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    def __init__(self, capacity: int, build: Callable[[K], V]) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._build = build
        self._values: OrderedDict[K, V] = OrderedDict()  # least recently used first
        self._building: dict[K, Future[V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        """The value for ``key``, built on a miss by the calling thread without holding the cache lock.

        A caller that finds ``key`` being built by another thread waits for that build and gets
        its value (or its exception); a failed build is not cached, so a later call tries again.
        """
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            pending = self._building.get(key)
            if pending is None:
                pending = self._building[key] = Future()
                builder = True
            else:
                builder = False
        if not builder:
            return pending.result()
        try:
            value = self._build(key)
        except BaseException as exc:
            with self._lock:
                del self._building[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._building[key]
            self._values[key] = value
            while len(self._values) > self._capacity:
                self._values.popitem(last=False)
        pending.set_result(value)
        return value

    def keys(self) -> list[K]:
        """The cached keys, least recently used first (for tests and diagnostics)."""
        with self._lock:
            return list(self._values)
