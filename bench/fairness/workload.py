"""The fairness bench's vocabulary: the tiers and gates it runs with, the workloads, and what a run records.

Both the virtual-time simulation (:mod:`bench.fairness.simulator`) and the real-time runs
(:mod:`bench.fairness.realtime`) make ``Request`` rows from ``Workload`` s, hand them to the real dispatcher as
``QueuedRun`` s and return a ``Result``; the statistics (:mod:`bench.fairness.stats`) read those.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduling.dispatcher import Dispatcher
from scheduling.gate import EngineSample, GatePolicy, TierGate
from scheduling.policy import QueuedRun, TierSpec

TIERS = [
    TierSpec("pro", 0),
    TierSpec("plus", 1, share_floor=0.2),
    TierSpec("free", 2, share_floor=0.1),
    TierSpec("batch", 3),
]
TIER_PRIORITY = {t.name: t.priority for t in TIERS}
GATE = GatePolicy(
    gates={  # the shipped defaults (core.config.scheduler_config_from_env)
        "pro": TierGate(max_waiting=4, max_tpot_s=2.0),
        "plus": TierGate(max_waiting=2, max_tpot_s=1.0),
        "free": TierGate(max_waiting=1, max_tpot_s=0.75),
        "batch": TierGate(max_waiting=1, max_tpot_s=0.5, only_when_idle=True),
    },
    fallback_max_in_flight=8,
    idle_running_fraction=0.5,
    headroom_slots=4,
)


OPEN_GATE = GatePolicy(
    gates={name: TierGate(max_waiting=10**9, max_tpot_s=1e9) for name in GATE.gates},
    fallback_max_in_flight=10**9,
    idle_running_fraction=1.0,
)


@dataclass
class Request:
    rid: int
    user: int
    tier: str
    arrival: float
    prompt: int
    output: int
    max_tokens: int
    first_token: float | None = None
    produced: int = 0
    dispatched_at: float | None = None
    started_at: float | None = None
    """When the engine took it into its running batch (virtual time only)."""
    batch: int = 0
    """Sequences in the engine's batch: when it started (virtual), in the last heartbeat at dispatch (real time)."""
    timing: Any = None
    """vLLM's split of dispatch -> first token (``EngineTiming``; real time on vllm only)."""
    ended: float | None = None
    """When its last token came (real time only; None: still running when the scenario ended)."""
    engine_priority: int = 0
    """The vLLM priority it was sent at (real time only)."""


@dataclass(frozen=True)
class Workload:
    user: int
    tier: str
    rate_per_s: float
    prompt: int
    output: int
    """Mean output tokens; each request draws an exponential length in [4, max_tokens], max_tokens = 3 x mean."""
    poisson: bool = True
    think_s: float | None = None
    """Closed loop (a person chatting): the next prompt comes this long on average after the answer ended;
    ``rate_per_s`` is then ignored."""
    start_s: float = 0.0
    """When the user starts sending (real time only: a user who arrives while another holds the engines)."""


def arrivals(workloads: list[Workload], horizon: float, seed: int) -> list[Request]:
    rng = random.Random(seed)
    rid = itertools.count(1)
    reqs: list[Request] = []
    for w in workloads:
        if w.think_s is not None:
            continue  # generated as the simulation runs
        t = rng.uniform(0, 1 / w.rate_per_s)
        while t < horizon:
            max_tokens = 3 * w.output
            length = min(max_tokens, max(4, int(rng.expovariate(1 / w.output))))
            reqs.append(Request(next(rid), w.user, w.tier, t, w.prompt, length, max_tokens))
            t += rng.expovariate(w.rate_per_s) if w.poisson else 1 / w.rate_per_s
    reqs.sort(key=lambda r: r.arrival)
    return reqs


class EngineRecord(Protocol):
    """What the figures read of an engine after a run: the virtual one, or a real-time run's ``Trace``."""

    produced: list[tuple[float, int, str, int]]
    """(time, user, tier, tokens) per step and user."""
    peak_waiting: int
    peak_running: int


@dataclass
class Trace:
    """What a real-time run records of its engine (the fields of ``Engine`` the figures read)."""

    produced: list[tuple[float, int, str, int]] = field(default_factory=list)
    peak_waiting: int = 0
    peak_running: int = 0
    samples: list[tuple[float, EngineSample]] = field(default_factory=list)
    """(time, heartbeat) as the dispatcher saw them."""
    preemptions: int = 0
    """Runs the dispatcher asked to yield that were in the engine (``GatePolicy.preempt``)."""


@dataclass
class Result:
    requests: list[Request]
    engine: EngineRecord
    horizon: float
    dispatched: list[tuple[float, Request]]


def tick_until_idle(dispatcher: Dispatcher) -> None:
    """What ``Dispatcher.run_forever`` does at one instant: tick again while a tick stopped at ``max_per_tick``."""
    while len(dispatcher.tick()) >= dispatcher.settings.max_per_tick:
        pass


def queued_run(req: Request) -> QueuedRun:
    """The run as admission queues it: charged its prompt plus its ``max_tokens``."""
    return QueuedRun(req.rid, req.user, req.tier, cost=req.prompt + req.max_tokens, enqueued_at=req.arrival)
