"""Engine backpressure: may a run of a given tier be sent to the workers now?

The dispatcher keeps the Celery queues short so the order the policy decides is the order served. It sends
a run only while the workers' heartbeats show room: vLLM's waiting requests below a per-tier threshold and
the recent time per output token below a per-tier limit. Runs dispatched after the newest heartbeat was
taken count as load too (they are on their way). Without fresh statistics it does not halt: it falls back
to a cap on the runs in flight (dispatched and not yet ended).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class TierGate:
    """Backpressure thresholds of one tier (stricter for lower tiers, so higher tiers keep headroom)."""

    max_waiting: int
    """Dispatch while the engines' waiting requests (plus runs just dispatched beyond the free slots) are below this."""
    max_tpot_s: float
    """Dispatch while the workers' recent time per output token is at most this many seconds."""
    only_when_idle: bool = False
    """Dispatch only when the engines are idle (batch): nothing waiting and few slots busy."""


def parse_gates(spec: str) -> dict[str, TierGate]:
    """``"pro=4:2.0,plus=2:1.0,batch=1:0.5:idle"`` (``SCHED_GATES``) as one gate per tier.

    Raises ``ValueError`` naming the item that is not ``tier=max_waiting:max_tpot_s[:idle]``.
    """
    gates: dict[str, TierGate] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rule = item.partition("=")
        fields = rule.split(":")
        try:
            if not name.strip() or len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] != "idle"):
                raise ValueError(item)
            gates[name.strip()] = TierGate(
                max_waiting=int(fields[0]), max_tpot_s=float(fields[1]), only_when_idle=len(fields) == 3
            )
        except ValueError:
            raise ValueError(f"SCHED_GATES item {item!r} is not tier=max_waiting:max_tpot_s[:idle]") from None
    return gates


@dataclass(frozen=True)
class EngineSample:
    """One worker's reported load (from its heartbeat)."""

    slots: int
    running: int
    waiting: int
    tpot_s: float | None
    updated_at: float
    """When the worker reported (liveness: staleness is judged by it)."""
    stats_at: float | None = None
    """When the engine measured ``running``/``waiting`` (None: at ``updated_at``). A heartbeat written during a
    long engine step repeats older figures; runs dispatched after this time are counted as load on top."""
    deployment: str = ""
    """The ``name@version`` the worker serves: a run of a deployment is gated on its workers' samples alone."""


@dataclass(frozen=True)
class EngineLoad:
    """The load of all workers together, as the gate sees it."""

    fresh: bool
    """At least one worker reported within the staleness bound."""
    slots: int
    running: int
    waiting: int
    tpot_s: float | None
    """The worst recent time per output token among the fresh workers."""
    in_flight: int
    """Runs dispatched and not yet ended (the scheduler's own count; the fallback cap applies to it)."""
    dispatched_since_stats: int
    """Runs dispatched after the oldest fresh heartbeat was written (not yet visible in the statistics)."""

    @property
    def effective_running(self) -> int:
        return min(self.slots, self.running + self.waiting + self.dispatched_since_stats)

    @property
    def effective_waiting(self) -> int:
        return max(0, self.running + self.waiting + self.dispatched_since_stats - self.slots)


def aggregate(
    samples: Iterable[EngineSample], *, now: float, stale_after_s: float
) -> tuple[list[EngineSample], float | None]:
    """The fresh samples and the time of the oldest figures among them (``stats_at``, else ``updated_at``; None
    when no worker reported lately): runs dispatched since then are not in the figures yet."""
    fresh = [s for s in samples if now - s.updated_at <= stale_after_s]
    measured = [s.stats_at if s.stats_at is not None else s.updated_at for s in fresh]
    return fresh, (min(measured) if measured else None)


def deployment_loads(
    samples: list[EngineSample], *, now: float, stale_after_s: float, in_flight: dict[str, int], recent: dict[str, int]
) -> dict[str, EngineLoad]:
    """One :class:`EngineLoad` per deployment that has workers or runs in flight: its fresh workers' figures and
    its own runs in flight (``recent``: those sent after the oldest figures of all; a slight overcount for a
    deployment whose own figures are newer, which only makes its gate more careful)."""
    names = {s.deployment for s in samples} | set(in_flight)
    loads: dict[str, EngineLoad] = {}
    for name in names:
        fresh, _ = aggregate([s for s in samples if s.deployment == name], now=now, stale_after_s=stale_after_s)
        loads[name] = engine_load(
            fresh, in_flight=in_flight.get(name, 0), dispatched_since_stats=recent.get(name, 0) if fresh else 0
        )
    return loads


def engine_load(fresh: list[EngineSample], *, in_flight: int, dispatched_since_stats: int) -> EngineLoad:
    tpots = [s.tpot_s for s in fresh if s.tpot_s is not None]
    return EngineLoad(
        fresh=bool(fresh),
        slots=sum(s.slots for s in fresh),
        running=sum(s.running for s in fresh),
        waiting=sum(s.waiting for s in fresh),
        tpot_s=max(tpots) if tpots else None,
        in_flight=in_flight,
        dispatched_since_stats=dispatched_since_stats,
    )


@dataclass(frozen=True)
class GatePolicy:
    gates: dict[str, TierGate]
    fallback_max_in_flight: int
    """Without fresh statistics: dispatch while fewer runs than this are in flight."""
    idle_running_fraction: float
    """The engines count as idle while nothing waits and at most this fraction of the slots is busy."""
    headroom_slots: int = 0
    """Slots kept for users below their share of the slots: a "busy" user (at or above ``slots / active users``
    in flight) is dispatched only while fewer than ``slots - headroom_slots`` are taken, so a user returning
    from idle finds a slot at once instead of waiting for one of a flood's runs to end (costs a few percent of
    peak batch; see docs/benchmarks.md "Fairness on the real engine")."""
    preempt: bool = False
    """Lend the headroom to a user alone on the engines, and take it back by preemption (``SCHED_PREEMPT``;
    ``scheduling.dispatcher`` decides when it is lent: ``admits(lend=True)``). ``headroom_slots`` also bounds the
    preemptions outstanding per deployment."""

    def full(self, load: EngineLoad) -> bool:
        """Every slot is taken (running, waiting in the engine, or just sent): a new run would wait in the engine."""
        return load.fresh and load.running + load.waiting + load.dispatched_since_stats >= load.slots

    def admits(self, tier: str, load: EngineLoad, *, user_busy: bool = False, lend: bool = False) -> bool:
        """Room for a run of ``tier``; ``user_busy``: its user holds at least their share of the slots; ``lend``: the
        headroom is lent (busy users may take it too)."""
        gate = self.gates[tier]
        if not load.fresh:
            cap = self.fallback_max_in_flight
            if gate.only_when_idle:
                cap = max(1, int(cap * self.idle_running_fraction))
            return load.in_flight < cap
        taken = load.running + load.waiting + load.dispatched_since_stats
        if user_busy and self.headroom_slots > 0 and not lend and taken >= load.slots - self.headroom_slots:
            return False
        if load.effective_waiting >= gate.max_waiting:
            return False
        if load.tpot_s is not None and load.tpot_s > gate.max_tpot_s:
            return False
        if gate.only_when_idle:
            return load.effective_waiting == 0 and load.effective_running < max(
                1, int(load.slots * self.idle_running_fraction)
            )
        return True
