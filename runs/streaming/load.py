"""How busy the relays are, as the writers see it: the adaptive coalescing interval.

Every writer keeps its run in ``streams:active`` (see ``runs.streaming.contract``); the number of runs
written within the last minute sets how often each writer flushes, so the web tier's total event rate
stays near ``STREAMS.event_budget_per_s`` however many streams are live.
"""

from __future__ import annotations

import threading
import time

import redis
from django.conf import settings

from core.redis_client import get_redis
from runs.streaming.contract import ACTIVE_STALE_S, active_streams_key


def flush_interval_for(active_streams: int) -> float:
    """The coalescing interval for each stream while ``active_streams`` runs are being written at once.

    The web tier relays about ``active / interval`` events per second in total; the interval grows linearly
    with the number of active streams so that total stays near ``settings.STREAMS.event_budget_per_s``,
    between ``flush_interval_s`` (a lone stream: every 50 ms, and its first token goes at once anyway) and
    ``max_flush_interval_s``. Example with the defaults (budget 4000/s): 1-200 streams: 50 ms; 1000: 250 ms;
    2000 and more: 500 ms (at 20 tokens/s that is ~10 tokens per event).
    """
    cfg = settings.STREAMS
    wanted = max(active_streams, 0) / cfg.event_budget_per_s
    return min(max(wanted, cfg.flush_interval_s), cfg.max_flush_interval_s)


def count_active_streams(*, client: redis.Redis | None = None) -> int:
    """Runs written within the last minute, crashed writers' leftovers pruned (two commands, one round trip)."""
    client = client or get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.zremrangebyscore(active_streams_key(), "-inf", time.time() - ACTIVE_STALE_S)
    pipe.zcard(active_streams_key())
    return int(pipe.execute()[1])


class _FlushIntervalCache:
    """Per-process cache so asking for the interval costs Redis at most one round trip a second."""

    def __init__(self, max_age_s: float = 1.0) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._value: float | None = None
        self._at = 0.0

    def get(self, client: redis.Redis | None = None) -> float:
        now = time.monotonic()
        with self._lock:
            if self._value is not None and now - self._at < self.max_age_s:
                return self._value
            self._at = now  # other threads keep the old value while this one refreshes
        try:
            value = flush_interval_for(count_active_streams(client=client))
        except redis.RedisError:
            value = self._value if self._value is not None else settings.STREAMS.flush_interval_s
        with self._lock:
            self._value = value
        return value


_flush_interval_cache = _FlushIntervalCache()


def current_flush_interval(*, client: redis.Redis | None = None) -> float:
    """What a worker's coalescer should use now as its flush interval (cached ~1 s; thread-safe).

    Call it at each flush decision: ``flush when buffered_tokens >= flush_max_tokens or
    now - last_flush >= current_flush_interval()`` (and flush the first token at once).
    """
    return _flush_interval_cache.get(client)
