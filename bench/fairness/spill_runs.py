"""Load-aware spill (``model_routing``): a light free user's TTFT while the large deployment is flooded, with the
router's spill off and on, in virtual time.

Two simulated engines stand for the two deployments of the router's tests and bench: ``large`` with 8 slots (the
stand-in registered with ``max_num_seqs=8``) and ``small`` with 32, the same step times (both are SmolLM2 here).
The real dispatcher (one, over both deployments, each gated on its own engine's heartbeats) and the real router
core (``model_routing.policy``: every prompt here scores hard, so the classifier sends it to the large model, and
spill may move it) decide. The router reads the gates as the web processes do: what the dispatcher's observer
published, at most once a second (``runs.dispatcher_figures``'s interval).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Mapping

from bench.fairness.simulator import SIM_SETTINGS, Engine, VirtualClock
from bench.fairness.stats import pct
from bench.fairness.workload import GATE, TIERS, Request, Workload, arrivals, queued_run, tick_until_idle
from model_routing.defaults import SPILL_BY_DEFAULT
from model_routing.policy import ModelSize, RouteFacts, RouterConfig, build_router
from scheduling.dispatcher import Dispatcher
from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import FairPolicy, QueuedRun

SMALL, LARGE = "small@v1", "large@v1"
PUBLISH_INTERVAL_S = 1.0
LIGHT_USER = 1


class AlwaysHard:
    def score(self, text: str) -> float:
        return 0.9


class PublishedGates:
    """The dispatcher's observer (what ``DispatcherFigures`` writes, at most once per interval) and the router's
    view of it."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.states: dict[tuple[str, str], bool] = {}
        self._at = float("-inf")

    def decided(self, run: QueuedRun, *, waited_s: float) -> None:
        pass

    def queued(self, backlog: Mapping[str, tuple[int, int]]) -> None:
        pass

    def ticked(
        self,
        gates: Mapping[str, bool],
        spreads: Mapping[str, float],
        deployment_gates: Mapping[tuple[str, str], bool],
    ) -> None:
        if self.clock.now - self._at >= PUBLISH_INTERVAL_S:
            self._at = self.clock.now
            self.states = dict(deployment_gates)

    def closed(self, tier: str, size: ModelSize) -> bool | None:
        state = self.states.get((tier, LARGE if size is ModelSize.LARGE else SMALL))
        return None if state is None else not state


def simulate_spill(
    workloads: list[Workload], closed_loop: list[Workload], horizon: float, *, spill: bool, seed: int
) -> tuple[list[Request], dict[int, str]]:
    """Every request and the deployment each was routed to."""
    rng = random.Random(seed + 1)
    engines = {SMALL: Engine(slots=32), LARGE: Engine(slots=8)}
    clock = VirtualClock()
    gates = PublishedGates(clock)
    routers = {  # each tier's default policy: free and plus spill, pro and batch wait for the large model
        t.name: build_router(
            RouterConfig(spill_enabled=spill and t.name in SPILL_BY_DEFAULT), scorer=AlwaysHard(), gates=gates
        )
        for t in TIERS
    }
    reqs = arrivals(workloads, horizon, seed)
    rid = itertools.count(10**6)
    loops = {w.user: w for w in closed_loop}

    def next_prompt(w: Workload, at: float) -> Request:
        max_tokens = 3 * w.output
        return Request(
            next(rid),
            w.user,
            w.tier,
            at,
            w.prompt,
            min(max_tokens, max(4, int(rng.expovariate(1 / w.output)))),
            max_tokens,
        )

    pending = [(r.arrival, r.rid, r) for r in reqs]
    for w in loops.values():
        first = next_prompt(w, rng.uniform(0, w.think_s or 1.0))
        reqs.append(first)
        pending.append((first.arrival, first.rid, first))
    heapq.heapify(pending)
    store = MemoryQueueStore(tiers=[t.name for t in TIERS], clock=clock)
    by_id: dict[int, Request] = {}
    routed: dict[int, str] = {}
    samples = {key: dataclasses.replace(e.sample(0.0), deployment=key) for key, e in engines.items()}

    def send(run: QueuedRun) -> None:
        req = by_id.pop(run.run_id)
        req.dispatched_at = clock.now
        engines[run.deployment].submit(req)

    dispatcher = Dispatcher(
        store=store,
        policy=FairPolicy(TIERS),
        gate=GATE,
        settings=SIM_SETTINGS,
        stats=lambda: list(samples.values()),
        send=send,
        clock=clock,
        use_leader_lock=False,
        observer=gates,
    )
    next_hb = 1.0
    while True:
        next_arrival = pending[0][0] if pending else float("inf")
        steps = {key: e.step_end for key, e in engines.items() if e.step_end is not None}
        now = clock.now = min(next_arrival, next_hb, *steps.values(), float("inf"))
        if now > horizon:
            break
        for key, end in steps.items():
            if end != now:
                continue
            for req in engines[key].finish_step(now):
                store.remove(req.rid)
                store.add_refund(tier=req.tier, user_id=req.user, amount=req.max_tokens - req.output)
                loop = loops.get(req.user)
                if loop is not None:
                    nxt = next_prompt(loop, now + rng.expovariate(1 / (loop.think_s or 1.0)))
                    reqs.append(nxt)
                    heapq.heappush(pending, (nxt.arrival, nxt.rid, nxt))
        if now == next_hb:
            samples = {key: dataclasses.replace(e.sample(now), deployment=key) for key, e in engines.items()}
            next_hb += 1.0
        while pending and pending[0][0] <= now:
            req = heapq.heappop(pending)[2]
            facts = RouteFacts("", req.prompt, 0, has_tools=False, structured=False, tier_name=req.tier)
            key = LARGE if routers[req.tier].choose(facts).size is ModelSize.LARGE else SMALL
            routed[req.rid] = key
            by_id[req.rid] = req
            store.push(dataclasses.replace(queued_run(req), deployment=key))
        tick_until_idle(dispatcher)
        for engine in engines.values():
            if engine.step_end is None:
                engine.start_step(now)
    return reqs, routed


def spill_figure(horizon: float, seed: int) -> None:
    print("\n== Load-aware spill: a light free user's TTFT while the large deployment is flooded ==")
    print("large: 8 slots, small: 32 (same step times); every prompt scores hard (the router picks large)")
    light = Workload(user=LIGHT_USER, tier="free", rate_per_s=0.0, prompt=100, output=64, think_s=5.0)
    scenarios = [
        ("pro floods large at 3x its capacity", [Workload(2, "pro", 2.0, 100, 64)]),
        ("free floods large at 3x its capacity", [Workload(2, "free", 2.0, 100, 64)]),
    ]
    print(
        f"{'scenario':38} {'spill':>5} {'light p50 s':>11} {'light p99 s':>11} {'n':>4} {'flood p50 s':>11} "
        f"{'light to small':>14} {'flood to small':>14}"
    )
    for name, flood in scenarios:
        for spill in (False, True):
            reqs, routed = simulate_spill(flood, [light], 3 * horizon, spill=spill, seed=seed)
            lt, ft = _ttfts(reqs, LIGHT_USER), _ttfts(reqs, 2)
            print(
                f"{name:38} {'on' if spill else 'off':>5} {_p(lt, 0.5):>11} {_p(lt, 0.99):>11} {len(lt):4d} "
                f"{_p(ft, 0.5):>11} {_to_small(reqs, routed, LIGHT_USER):>14.0%} {_to_small(reqs, routed, 2):>14.0%}"
            )
    print(
        "light: a free user chatting (next prompt ~5 s after each answer); '-': no first token at all after the "
        "60 s warm-up. The flood's TTFT grows without bound (it is 3x the large model's capacity)."
    )


WARMUP_S = 60.0


def _ttfts(reqs: list[Request], user: int) -> list[float]:
    return [
        r.first_token - r.arrival
        for r in reqs
        if r.user == user and r.first_token is not None and r.arrival >= WARMUP_S
    ]


def _p(values: list[float], q: float) -> str:
    return f"{pct(values, q):.2f}" if values else "-"


def _to_small(reqs: list[Request], routed: dict[int, str], user: int) -> float:
    mine = [r for r in reqs if r.user == user and r.rid in routed]
    return sum(routed[r.rid] == SMALL for r in mine) / len(mine) if mine else float("nan")
