"""The dispatcher's figures for Prometheus, kept in Redis because the dispatcher is a process of its own.

The leading dispatcher reports to :class:`DispatcherFigures` (the ``observer`` of ``scheduling.dispatcher``):
each run it sends (a decision, with its time in the scheduler's queue, enqueue to dispatch) and, after each
tick, whether each tier's gate is open. They are written as ``runs.counters`` writes the run counters, but
buffered: one pipelined round trip at the end of a tick, at most once a second (the dispatcher ticks at least
every ``SCHED_TICK_S``, so nothing waits longer; a dispatcher that stops loses at most its last second):

* ``metrics:dispatcher`` (a hash, kept): ``decisions|<tier>`` and the queue-wait histogram
  ``queue_wait_bucket|<tier>|<le>`` (cumulative), ``queue_wait_sum|<tier>``, ``queue_wait_count|<tier>``, by
  ``HINCRBY``/``HINCRBYFLOAT``;
* ``metrics:dispatcher:state`` (a hash with a TTL, rewritten whole): ``gate|<tier>|<deployment>`` 1/0,
  ``spread|<tier>`` (VTC's service difference between the tier's backlogged users, tokens),
  ``queued_runs|<deployment>`` and ``queued_tokens|<deployment>`` (the whole queue per deployment, as of the
  leader's last positions refresh: what an autoscaler such as KEDA sizes workers on) and ``written_at``.
  It vanishes ``STATE_TTL_S`` after the leader stops, so a dead dispatcher shows no gates.

``monitoring.prometheus`` reads both at scrape time (:func:`read_dispatcher_figures`). Recording never raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis
from redis.typing import EncodableT, FieldT

from core.redis_client import get_redis
from runs.counters import Histogram
from scheduling.gate_state import GATE_STATE_KEY, GATE_STATE_TTL_S, gate_field, parse_gate_states
from scheduling.policy import QueuedRun

logger = logging.getLogger(__name__)

COUNTERS_KEY = "metrics:dispatcher"
STATE_KEY = GATE_STATE_KEY
"""Shared with the router's load-aware spill (``scheduling.gate_state``), which reads the gates from it."""
STATE_TTL_S = GATE_STATE_TTL_S
WRITE_INTERVAL_S = 1.0
QUEUE_WAIT_BUCKETS_S: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Upper bounds of the scheduler queue-wait histogram (seconds): finer at the low end than the run histograms,
since an idle system dispatches within milliseconds."""


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class DispatcherFigures:
    """Buffers the leader's decisions and writes them, with the gate states of the tick, to Redis at most every
    ``write_interval_s``."""

    def __init__(
        self,
        *,
        deployment: str,
        client: redis.Redis | None = None,
        write_interval_s: float = WRITE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deployment = deployment
        self.client = client or get_redis()
        self.write_interval_s = write_interval_s
        self.clock = clock
        self._pending: dict[str, float] = {}
        self._backlog: dict[str, tuple[int, int]] = {}
        self._written_at = float("-inf")

    def queued(self, backlog: Mapping[str, tuple[int, int]]) -> None:
        self._backlog = dict(backlog)

    def decided(self, run: QueuedRun, *, waited_s: float) -> None:
        tier = run.tier
        fields = self._pending
        fields[f"decisions|{tier}"] = fields.get(f"decisions|{tier}", 0) + 1
        for bound in (*QUEUE_WAIT_BUCKETS_S, float("inf")):
            if waited_s <= bound:
                key = f"queue_wait_bucket|{tier}|{_bucket_label(bound)}"
                fields[key] = fields.get(key, 0) + 1
        fields[f"queue_wait_sum|{tier}"] = fields.get(f"queue_wait_sum|{tier}", 0.0) + waited_s
        fields[f"queue_wait_count|{tier}"] = fields.get(f"queue_wait_count|{tier}", 0) + 1

    def ticked(
        self,
        gates: Mapping[str, bool],
        spreads: Mapping[str, float],
        deployment_gates: Mapping[tuple[str, str], bool] | None = None,
    ) -> None:
        """Writes each deployment's gates (``deployment_gates``; without any, the gates of all the workers together
        under ``self.deployment``)."""
        now = self.clock()
        if now - self._written_at < self.write_interval_s:
            return
        self._written_at = now
        pending, self._pending = self._pending, {}
        by_deployment = deployment_gates or {(tier, self.deployment): o for tier, o in gates.items()}
        state: dict[FieldT, EncodableT] = {gate_field(tier, dep): int(o) for (tier, dep), o in by_deployment.items()}
        state.update({f"spread|{tier}": round(float(v), 1) for tier, v in spreads.items()})
        for dep, (runs, tokens) in self._backlog.items():
            state[f"queued_runs|{dep}"] = runs
            state[f"queued_tokens|{dep}"] = tokens
        state["written_at"] = time.time()
        try:
            pipe = self.client.pipeline(transaction=False)
            for name, amount in pending.items():
                if float(amount).is_integer():
                    pipe.hincrby(COUNTERS_KEY, name, int(amount))
                else:
                    pipe.hincrbyfloat(COUNTERS_KEY, name, amount)
            pipe.delete(STATE_KEY)
            pipe.hset(STATE_KEY, mapping=state)
            pipe.expire(STATE_KEY, STATE_TTL_S)
            pipe.execute()
        except redis.RedisError:
            logger.warning("metrics: Redis unavailable, %d dispatcher figures lost", len(pending))


@dataclass
class DispatcherMetrics:
    decisions: dict[str, float] = field(default_factory=dict)
    queue_wait: dict[str, Histogram] = field(default_factory=dict)
    """By tier."""
    gates: dict[tuple[str, str], bool] = field(default_factory=dict)
    """``(tier, deployment)`` -> open; empty when no dispatcher led lately."""
    spreads: dict[str, float] = field(default_factory=dict)
    """Tier -> VTC's service difference between its backlogged users at the leader's last write (tokens)."""
    backlog: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Deployment -> (queued runs, their tokens) at the leader's last positions refresh."""
    written_at: float | None = None
    """Unix time of the leader's last write of the gate states."""


def read_dispatcher_figures(*, client: redis.Redis | None = None) -> DispatcherMetrics:
    """Everything recorded so far (raises ``redis.RedisError`` when Redis is down)."""
    client = client or get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(COUNTERS_KEY)
    pipe.hgetall(STATE_KEY)
    counters, state = pipe.execute()
    out = DispatcherMetrics()
    for key, value in counters.items():
        parts = str(key).split("|")
        amount = float(value)
        if parts[0] == "decisions" and len(parts) == 2:
            out.decisions[parts[1]] = amount
        elif parts[0].startswith("queue_wait_") and len(parts) >= 2:
            hist = out.queue_wait.setdefault(parts[1], Histogram())
            if parts[0] == "queue_wait_bucket" and len(parts) == 3:
                hist.buckets[parts[2]] = amount
            elif parts[0] == "queue_wait_sum":
                hist.sum = amount
            elif parts[0] == "queue_wait_count":
                hist.count = amount
    out.gates = parse_gate_states(state)
    for key, value in state.items():
        parts = str(key).split("|")
        if parts[0] == "spread" and len(parts) == 2:
            out.spreads[parts[1]] = float(value)
        elif parts[0] in ("queued_runs", "queued_tokens") and len(parts) == 2:
            runs, tokens = out.backlog.get(parts[1], (0, 0))
            amount = int(float(value))
            out.backlog[parts[1]] = (amount, tokens) if parts[0] == "queued_runs" else (runs, amount)
        elif parts[0] == "written_at":
            out.written_at = float(value)
    return out
