"""The dispatcher's gates as the web processes see them: the published hash, re-read at most every
``GATE_CACHE_S`` per process (one ``HGETALL`` of a small hash), so a prompt pays no Redis round trip for it.

The dispatcher writes the hash at most once a second, so the view is at most about 1.2 s old; it vanishes when no
dispatcher leads (``GATE_STATE_TTL_S``), and then nothing spills (an unknown gate is never treated as closed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis

from core.redis_client import get_redis
from model_routing.policy import ModelSize
from scheduling.gate_state import read_gate_states

logger = logging.getLogger(__name__)

GATE_CACHE_S = 0.2


class PublishedGates:
    """A per-process copy of the published gate states (thread-safe; one reader refreshes it)."""

    def __init__(
        self,
        *,
        read: Callable[[], dict[tuple[str, str], bool]] | None = None,
        max_age_s: float = GATE_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read or (lambda: read_gate_states(get_redis()))
        self.max_age_s = max_age_s
        self.clock = clock
        self._states: dict[tuple[str, str], bool] = {}
        self._at = float("-inf")
        self._lock = threading.Lock()

    def states(self) -> Mapping[tuple[str, str], bool]:
        if self.clock() - self._at > self.max_age_s:
            with self._lock:
                if self.clock() - self._at > self.max_age_s:
                    try:
                        self._states = self.read()
                    except redis.RedisError:
                        logger.warning("router: Redis unavailable, gate states unknown (no spill)")
                        self._states = {}
                    self._at = self.clock()
        return self._states

    def clear(self) -> None:
        with self._lock:
            self._at = float("-inf")


published_gates = PublishedGates()


@dataclass(frozen=True)
class CandidateGates:
    """The :class:`~model_routing.policy.GateView` of one decision: each candidate's serving versions (keys) against
    the published states. A candidate is closed for a tier when every one of its versions was published closed;
    any version unpublished (no worker reported, no dispatcher) makes it unknown."""

    states: Mapping[tuple[str, str], bool]
    small: Sequence[str]
    large: Sequence[str]

    def closed(self, tier: str, size: ModelSize) -> bool | None:
        keys = self.large if size is ModelSize.LARGE else self.small
        found = [self.states.get((tier, key)) for key in keys]
        if not found or any(state is None for state in found):
            return None
        return not any(found)
