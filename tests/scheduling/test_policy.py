"""The pure scheduling policy and gate, with in-memory queues, fake engine statistics and no Redis."""

from __future__ import annotations

import copy
import itertools
from collections import Counter

import pytest

from scheduling.dispatcher import fair_slot_share, user_is_busy
from scheduling.gate import EngineLoad, EngineSample, GatePolicy, TierGate, aggregate, engine_load
from scheduling.policy import FairPolicy, QueuedRun, TierSpec, UserQueues, dispatch_one, forecast_order
from tests.scheduling.random_backlog import random_backlog

TIERS = [
    TierSpec("pro", 0),
    TierSpec("plus", 1, share_floor=0.2),
    TierSpec("free", 2, share_floor=0.1),
    TierSpec("batch", 3),
]
_ids = itertools.count(1)


def run(user: int, tier: str = "free", cost: int = 100, weight: float = 1.0) -> QueuedRun:
    rid = next(_ids)
    return QueuedRun(run_id=rid, user_id=user, tier=tier, cost=cost, weight=weight, enqueued_at=float(rid))


def drain(policy: FairPolicy, queues: UserQueues, n: int, admits=lambda _t, _r: True) -> list[QueuedRun]:
    out = []
    for _ in range(n):
        r = dispatch_one(policy, queues, admits)
        if r is None:
            break
        out.append(r)
    return out


def test_equal_costs_alternate_between_users_even_when_one_floods() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(10):
        queues.push(run(1))
    for _ in range(3):
        queues.push(run(2))
    order = [r.user_id for r in drain(policy, queues, 13)]
    assert order[:6] == [1, 2, 1, 2, 1, 2]
    assert order[6:] == [1] * 7


def test_round_robin_is_weighted_by_token_cost() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(10):
        queues.push(run(1, cost=400))
        queues.push(run(2, cost=100))
    served = drain(policy, queues, 10)
    tokens: Counter[int] = Counter()
    for r in served:
        tokens[r.user_id] += r.cost
    # Token service stays within one large request of equal.
    assert abs(tokens[1] - tokens[2]) <= 400
    assert Counter(r.user_id for r in served)[2] >= 3 * Counter(r.user_id for r in served)[1] - 1


def test_a_user_returning_from_idle_gets_no_credit_for_the_idle_time() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(20):
        queues.push(run(1))
    drain(policy, queues, 10)  # user 1 alone: its counter runs ahead while user 2 is idle
    for _ in range(10):
        queues.push(run(2))
    order = [r.user_id for r in drain(policy, queues, 8)]
    # Without the lift user 2 would get 10 in a row; with it they alternate at once.
    assert order.count(2) <= 5
    assert order[:4] in ([2, 1, 2, 1], [1, 2, 1, 2])


def test_a_user_cannot_bank_credit_by_going_idle_after_being_served_a_lot() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(5):
        queues.push(run(1))
        queues.push(run(2))
    drain(policy, queues, 10)
    for _ in range(5):
        queues.push(run(1))
    drain(policy, queues, 5)  # user 1 alone: far ahead now
    for _ in range(5):
        queues.push(run(1))
        queues.push(run(2))
    order = [r.user_id for r in drain(policy, queues, 4)]
    assert order == [2, 1, 2, 1] or order == [1, 2, 1, 2]


def test_share_weight_gives_a_proportional_share() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(30):
        queues.push(run(1, weight=2.0))
        queues.push(run(2))
    counts = Counter(r.user_id for r in drain(policy, queues, 30))
    assert counts[1] == 20 and counts[2] == 10


def test_strict_priority_across_tiers_without_floor() -> None:
    policy, queues = FairPolicy([TierSpec("pro", 0), TierSpec("free", 2)]), UserQueues()
    for _ in range(5):
        queues.push(run(2, tier="free"))
        queues.push(run(1, tier="pro"))
    assert [r.tier for r in drain(policy, queues, 10)] == ["pro"] * 5 + ["free"] * 5


@pytest.mark.parametrize("floor", [0.1, 0.25])
def test_floor_share_of_a_backlogged_lower_tier(floor: float) -> None:
    policy = FairPolicy([TierSpec("pro", 0), TierSpec("free", 2, share_floor=floor)])
    queues = UserQueues()
    for _ in range(400):
        queues.push(run(1, tier="pro"))
        queues.push(run(2, tier="free"))
    served = drain(policy, queues, 400)
    share = sum(r.cost for r in served if r.tier == "free") / sum(r.cost for r in served)
    assert floor - 0.02 <= share <= floor + 0.02
    # Spread out, not bunched: every window of 2/floor dispatches has a free run.
    window = int(2 / floor)
    tiers = [r.tier for r in served]
    assert all("free" in tiers[i : i + window] for i in range(0, len(tiers) - window))


def test_floor_credit_is_not_banked_while_the_tier_is_idle() -> None:
    policy = FairPolicy([TierSpec("pro", 0), TierSpec("free", 2, share_floor=0.5)])
    queues = UserQueues()
    for _ in range(50):
        queues.push(run(1, tier="pro"))
    drain(policy, queues, 40)  # free idle: no credit accrues
    for _ in range(10):
        queues.push(run(2, tier="free"))
    first = [r.tier for r in drain(policy, queues, 4)]
    assert first.count("free") <= 2  # at its floor share, not a burst of 20 saved-up dispatches


def test_floor_tier_may_use_the_room_of_the_top_tier() -> None:
    policy = FairPolicy([TierSpec("pro", 0), TierSpec("free", 2, share_floor=0.5)])
    queues = UserQueues()
    for _ in range(20):
        queues.push(run(1, tier="pro"))
        queues.push(run(2, tier="free"))
    served = drain(policy, queues, 20, admits=lambda tier, _r: tier == "pro")  # free's own gate never opens
    assert sum(r.tier == "free" for r in served) >= 8


def test_nothing_is_chosen_when_the_top_tier_is_gated() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    queues.push(run(1, tier="pro"))
    queues.push(run(2, tier="free"))
    assert dispatch_one(policy, queues, lambda _t, _r: False) is None
    assert len(queues) == 2


def test_policy_state_round_trips_through_a_dict() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(3):
        queues.push(run(1))
        queues.push(run(2, cost=50))
    drain(policy, queues, 3)
    copy = FairPolicy(TIERS)
    copy.load_dict(policy.to_dict())
    assert copy.to_dict() == policy.to_dict()
    expected = [r.run_id for r in forecast_order(policy, queues, 3)]
    assert [r.run_id for r in drain(copy, queues, 3)] == expected


def test_forecast_order_does_not_change_the_state() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    runs = [run(1), run(1), run(2), run(3, tier="pro")]
    for r in runs:
        queues.push(r)
    before = policy.to_dict()
    order = forecast_order(policy, queues, 10)
    assert [r.run_id for r in order] == [runs[3].run_id, runs[0].run_id, runs[2].run_id, runs[1].run_id]
    assert policy.to_dict() == before and len(queues) == 4


@pytest.mark.parametrize("seed", range(8))
def test_forecast_order_is_exactly_one_decision_after_another(seed: int) -> None:
    """The forecast keeps the users in order across decisions (``OrderedHeads``) instead of sorting them for each:
    it must give exactly what deciding one run at a time gives, floors, weights, refunds and ties included."""
    policy, queues = random_backlog(seed, users=1 + seed * 7, runs=300)
    expected = [r.run_id for r in drain(copy.deepcopy(policy), copy.deepcopy(queues), 1000)]
    assert [r.run_id for r in forecast_order(policy, queues, 1000)] == expected
    assert [r.run_id for r in forecast_order(policy, queues, 17)] == expected[:17]


# -- the gate -----------------------------------------------------------------------------------------

GATE = GatePolicy(
    gates={
        "pro": TierGate(max_waiting=4, max_tpot_s=2.0),
        "free": TierGate(max_waiting=1, max_tpot_s=0.75),
        "batch": TierGate(max_waiting=1, max_tpot_s=0.5, only_when_idle=True),
    },
    fallback_max_in_flight=3,
    idle_running_fraction=0.5,
)


def load(
    running: int = 0,
    waiting: int = 0,
    tpot: float | None = 0.2,
    *,
    fresh: bool = True,
    in_flight: int = 0,
    since: int = 0,
    slots: int = 8,
) -> EngineLoad:
    return EngineLoad(
        fresh=fresh,
        slots=slots,
        running=running,
        waiting=waiting,
        tpot_s=tpot,
        in_flight=in_flight,
        dispatched_since_stats=since,
    )


def test_dispatch_is_gated_on_waiting_requests_per_tier() -> None:
    assert GATE.admits("free", load(running=8, waiting=0))
    assert not GATE.admits("free", load(running=8, waiting=1))
    assert GATE.admits("pro", load(running=8, waiting=3))
    assert not GATE.admits("pro", load(running=8, waiting=4))


def test_runs_dispatched_since_the_last_heartbeat_count_as_load() -> None:
    assert GATE.admits("free", load(running=7))
    assert not GATE.admits("free", load(running=7, since=2))  # 7 + 2 > 8 slots: one would wait


def test_dispatch_is_gated_on_time_per_output_token() -> None:
    assert GATE.admits("free", load(tpot=0.7))
    assert not GATE.admits("free", load(tpot=0.8))
    assert GATE.admits("pro", load(tpot=0.8))
    assert GATE.admits("free", load(tpot=None))  # nothing decoded lately: no evidence of slowness


def test_batch_only_when_the_engines_are_idle() -> None:
    assert GATE.admits("batch", load(running=0))
    assert GATE.admits("batch", load(running=3))
    assert not GATE.admits("batch", load(running=4))  # half the slots busy
    assert not GATE.admits("batch", load(running=0, since=4))
    assert not GATE.admits("batch", load(running=0, tpot=0.6))


def test_stale_statistics_fall_back_to_a_concurrency_cap() -> None:
    samples = [EngineSample(slots=8, running=0, waiting=9, tpot_s=5.0, updated_at=100.0)]
    fresh, oldest = aggregate(samples, now=120.0, stale_after_s=5.0)
    assert fresh == [] and oldest is None
    stale = engine_load(fresh, in_flight=2, dispatched_since_stats=0)
    assert not stale.fresh
    assert GATE.admits("free", stale)  # does not halt
    assert not GATE.admits("free", engine_load(fresh, in_flight=3, dispatched_since_stats=0))
    assert GATE.admits("batch", engine_load(fresh, in_flight=0, dispatched_since_stats=0))
    assert not GATE.admits("batch", engine_load(fresh, in_flight=1, dispatched_since_stats=0))


def test_fresh_samples_are_summed_and_the_worst_tpot_wins() -> None:
    samples = [
        EngineSample(slots=8, running=8, waiting=1, tpot_s=0.3, updated_at=99.0),
        EngineSample(slots=8, running=2, waiting=0, tpot_s=0.9, updated_at=100.0),
        EngineSample(slots=8, running=0, waiting=50, tpot_s=9.0, updated_at=10.0),  # stale: ignored
    ]
    fresh, oldest = aggregate(samples, now=101.0, stale_after_s=5.0)
    agg = engine_load(fresh, in_flight=11, dispatched_since_stats=0)
    assert (agg.slots, agg.running, agg.waiting, agg.tpot_s, oldest) == (16, 10, 1, 0.9, 99.0)
    assert agg.effective_waiting == 0 and agg.effective_running == 11


def test_runs_are_counted_from_when_the_engine_measured_its_figures_not_from_the_heartbeat() -> None:
    long_step = EngineSample(slots=8, running=4, waiting=0, tpot_s=0.3, updated_at=100.0, stats_at=91.0)
    plain = EngineSample(slots=8, running=4, waiting=0, tpot_s=0.3, updated_at=99.0)
    # Fresh by the heartbeat's write time (the worker is alive) even though its figures are 9 s old.
    assert aggregate([long_step], now=100.5, stale_after_s=5.0) == ([long_step], 91.0)
    assert aggregate([plain], now=100.5, stale_after_s=5.0) == ([plain], 99.0)  # older workers: the write time
    assert aggregate([long_step, plain], now=100.5, stale_after_s=5.0)[1] == 91.0


def test_a_returning_user_goes_before_the_flooding_user_on_equal_counters() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(10):
        queues.push(run(1))
    drain(policy, queues, 3)
    light = run(2)
    queues.push(light)
    assert dispatch_one(policy, queues, lambda _t, _r: True) == light  # lifted to the same counter, served longer ago


def test_headroom_slots_are_kept_for_users_with_nothing_in_flight() -> None:
    gate = GatePolicy(gates=GATE.gates, fallback_max_in_flight=3, idle_running_fraction=0.5, headroom_slots=2)
    assert gate.admits("pro", load(running=5), user_busy=True)
    assert not gate.admits("pro", load(running=6), user_busy=True)  # 2 of 8 slots stay free
    assert not gate.admits("pro", load(running=5, since=1), user_busy=True)
    assert gate.admits("pro", load(running=7), user_busy=False)  # a newcomer takes one
    assert gate.admits("pro", load(running=6, fresh=False, in_flight=2), user_busy=True)  # fallback: the cap only


def test_within_a_tier_the_first_admissible_user_in_counter_order_goes() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for _ in range(5):
        queues.push(run(1))
    drain(policy, queues, 2)
    newcomer = run(2)
    queues.push(newcomer)
    queues.push(run(3))
    # Users 1 and 3 are "busy" for the gate; user 2 (counter lifted to 1's) is the only admissible one.
    assert dispatch_one(policy, queues, lambda _tier, r: r.user_id == 2) == newcomer


def test_a_returning_user_ahead_on_tokens_gets_a_headroom_slot_while_a_flood_holds_its_runs() -> None:
    """8 slots, 2 of them headroom: a flood holds 6 runs that do not end (a slow engine). A chatting user's
    second prompt is ahead on tokens (lifted to the flood's counter, then charged its first run) and must not
    wait for one of the flood's runs to end: the headroom is for users below their share of the slots."""
    gate = GatePolicy(gates=GATE.gates, fallback_max_in_flight=3, idle_running_fraction=0.5, headroom_slots=2)
    policy, queues = FairPolicy(TIERS), UserQueues()
    in_flight: dict[int, int] = {}

    def step() -> QueuedRun | None:
        """One decision with the engine statistics of the runs in flight (one heartbeat per decision)."""
        heads = queues.heads()
        share = fair_slot_share(8, in_flight, heads)
        top = next((t.name for t in TIERS if heads.get(t.name)), None)
        engine = load(running=sum(in_flight.values()))
        chosen = dispatch_one(
            policy,
            queues,
            lambda tier, r: gate.admits(
                tier, engine, user_busy=user_is_busy(r, in_flight=in_flight, share=share, top_tier=top)
            ),
        )
        if chosen is not None:
            in_flight[chosen.user_id] = in_flight.get(chosen.user_id, 0) + 1
        return chosen

    for _ in range(20):
        queues.push(run(1))
    flood = [step() for _ in range(7)]
    assert [r.user_id if r else None for r in flood] == [1] * 6 + [None]  # the flood stops at slots - headroom
    queues.push(first := run(2))
    assert step() == first
    in_flight[2] -= 1  # the chatting user's answer ends; none of the flood's runs has
    queues.push(second := run(2))
    assert policy.counter("free", 2) > policy.counter("free", 1)  # ahead on tokens by its first run
    assert step() == second
    assert step() is None  # the flood (at its share) still waits for a run of its own to end


def test_counter_spread_is_the_service_difference_between_backlogged_users() -> None:
    policy, queues = FairPolicy(TIERS), UserQueues()
    for cost in (100, 100, 100):
        queues.push(run(1, cost=cost))
    queues.push(run(2, cost=30))
    queues.push(run(2, cost=30))
    assert policy.counter_spread()["free"] == 0  # nobody synced yet
    # User 1 (lowest counter, served least recently... both 0: user 1's run is older) goes, then user 2.
    assert [r.user_id for r in drain(policy, queues, 2)] == [1, 2]
    policy.sync(queues.heads())
    assert policy.counter_spread()["free"] == 70  # 100 charged against 30
    policy.refund("free", 1, 50)  # user 1's run used half of what it was charged
    assert policy.counter_spread()["free"] == 20
    drain(policy, queues, 1)  # user 2 (30 < 50) goes again and has nothing left queued
    policy.sync(queues.heads())
    assert policy.counter_spread() == {"pro": 0, "plus": 0, "free": 0, "batch": 0}  # one backlogged user
