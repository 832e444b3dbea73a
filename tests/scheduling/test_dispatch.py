"""The dispatcher loop over both queue stores (Redis and in memory), with fake engine statistics, a fake clock
and a fake sender; what only Redis can show (two dispatchers racing, the blocking wake-up) over Redis."""

from __future__ import annotations

import copy
import threading
from collections import Counter
from dataclasses import replace

import pytest

from scheduling.dispatcher import HEADROOM_TOKEN_ALLOWANCE, Dispatcher, DispatcherSettings, engine_priority
from scheduling.gate import EngineSample, GatePolicy, TierGate
from scheduling.policy import FairPolicy, QueuedRun, TierSpec, UserQueues, dispatch_one
from scheduling.redis_store import RedisQueueStore
from scheduling.store import InFlight, Position, QueueStore
from tests.scheduling.random_backlog import random_backlog

TIERS = ["pro", "plus", "free", "batch"]
SPECS = [
    TierSpec("pro", 0),
    TierSpec("plus", 1, share_floor=0.2),
    TierSpec("free", 2, share_floor=0.1),
    TierSpec("batch", 3),
]
GATE = GatePolicy(
    gates={
        "pro": TierGate(max_waiting=4, max_tpot_s=2.0),
        "plus": TierGate(max_waiting=2, max_tpot_s=1.0),
        "free": TierGate(max_waiting=1, max_tpot_s=0.75),
        "batch": TierGate(max_waiting=1, max_tpot_s=0.5, only_when_idle=True),
    },
    fallback_max_in_flight=3,
    idle_running_fraction=0.5,
)
SETTINGS = DispatcherSettings(
    stale_after_s=5.0, in_flight_ttl_s=3600, tick_s=0.001, positions_interval_s=0.0, leader_ttl_ms=5000
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_dispatcher(
    store: QueueStore,
    samples: list[EngineSample],
    sent: list[QueuedRun],
    clock: FakeClock,
    *,
    gate: GatePolicy = GATE,
    **kwargs,
) -> Dispatcher:
    kwargs.setdefault("send", sent.append)
    kwargs.update(policy=FairPolicy(SPECS), gate=gate, settings=SETTINGS, clock=clock)
    return Dispatcher(store=store, stats=lambda: samples, **kwargs)


def q(run_id: int, user: int, tier: str = "free", cost: int = 100) -> QueuedRun:
    return QueuedRun(run_id=run_id, user_id=user, tier=tier, cost=cost, enqueued_at=float(run_id))


def test_dispatch_follows_the_policy_and_marks_runs_in_flight(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(4):
        store.push(q(100 + i, 1))
    store.push(q(200, 2))
    samples = [EngineSample(slots=32, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    d.tick()
    assert [r.user_id for r in sent[:3]] == [1, 2, 1]
    # Runs dispatched after the heartbeat count as load: 5 in flight < 32 slots, so all went.
    assert len(sent) == 5 and store.in_flight(now=clock.now, ttl_s=3600, since=clock.now) == InFlight(
        5, 5, {1: 4, 2: 1}, per_deployment={"": 5}, recent_per_deployment={"": 5}
    )


def test_dispatch_is_gated_on_engine_statistics(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(10):
        store.push(q(i + 1, 1))
    samples = [EngineSample(slots=4, running=4, waiting=1, tpot_s=0.2, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    assert d.tick() == []  # free tier waits while anything is waiting in the engine
    samples[0] = EngineSample(slots=4, running=2, waiting=0, tpot_s=0.2, updated_at=clock.now)
    assert len(d.tick()) == 3  # two free slots, then one more while nothing waits (max_waiting=1)
    clock.now += 0.5
    samples[0] = EngineSample(slots=4, running=0, waiting=0, tpot_s=0.9, updated_at=clock.now)
    assert d.tick() == []  # too slow per output token for the free tier


def test_a_heartbeat_repeating_old_engine_figures_does_not_reopen_the_gate(store: QueueStore) -> None:
    """During a long engine step (a burst of prefills on a CPU) the worker keeps writing heartbeats with the
    figures of the last step; runs sent since those figures were measured still count as load."""
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(10):
        store.push(q(i + 1, 1))
    measured = clock.now
    samples = [EngineSample(slots=4, running=2, waiting=0, tpot_s=0.2, updated_at=clock.now, stats_at=measured)]
    d = make_dispatcher(store, samples, sent, clock)
    assert len(d.tick()) == 3  # two free slots, then one waiting (max_waiting=1)
    clock.now += 1.0  # the next heartbeat: written now, the same figures (no engine step ended)
    samples[0] = EngineSample(slots=4, running=2, waiting=0, tpot_s=0.2, updated_at=clock.now, stats_at=measured)
    assert d.tick() == []
    # Without the measurement time the heartbeat would look new and the three runs already sent would be forgotten.
    samples[0] = EngineSample(slots=4, running=2, waiting=0, tpot_s=0.2, updated_at=clock.now)
    assert len(d.tick()) == 3


def test_stale_statistics_fall_back_to_the_in_flight_cap(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(10):
        store.push(q(i + 1, 1))
    samples = [EngineSample(slots=32, running=0, waiting=0, tpot_s=None, updated_at=clock.now - 60)]
    d = make_dispatcher(store, samples, sent, clock)
    assert len(d.tick()) == 3  # fallback cap, not a halt
    assert d.last_load is not None and not d.last_load.fresh
    assert d.tick() == []
    store.remove(sent[0].run_id)  # one run ended
    assert len(d.tick()) == 1
    # No heartbeat at all behaves the same.
    d2 = make_dispatcher(store, [], sent, clock)
    assert d2.tick() == [] and d2.last_load is None  # the first dispatcher still leads
    store.release_leadership(d.token)
    assert d2.tick() == [] and d2.last_load is not None and not d2.last_load.fresh


def test_a_chatting_user_is_dispatched_at_once_while_a_flood_holds_the_engine(store: QueueStore) -> None:
    """The real dispatcher over an engine model in virtual time: 8 slots, 2 of them headroom, every run ends 1 s
    after its dispatch, a heartbeat every 0.1 s step. A flood keeps 200 runs queued; a second user sends a prompt
    every 3 s. The flood never takes the headroom, and each of the other user's prompts goes in the tick it arrives
    (not after one of the flood's runs ends), while the flood still gets the rest of the engine."""
    gate = GatePolicy(gates=GATE.gates, fallback_max_in_flight=3, idle_running_fraction=0.5, headroom_slots=2)
    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [EngineSample(slots=8, running=0, waiting=0, tpot_s=0.1, updated_at=clock.now)]
    d = Dispatcher(
        store=store,
        policy=FairPolicy(SPECS),
        gate=gate,
        settings=SETTINGS,
        stats=lambda: samples,
        send=sent.append,
        clock=clock,
    )
    for i in range(200):
        store.push(q(1000 + i, user=1))
    start = clock.now
    ends: dict[int, int] = {}
    """Run in flight -> the step it ends at."""
    waits: list[int] = []
    for step in range(200):
        clock.now = start + step / 10
        for run_id, end in list(ends.items()):
            if end <= step:  # the run ended: the web process takes it out of the in-flight set
                assert store.remove(run_id) == 2
                del ends[run_id]
        if step % 30 == 5:
            store.push(q(step, user=2))  # its run id is the step it arrives at
        samples[0] = EngineSample(slots=8, running=len(ends), waiting=0, tpot_s=0.1, updated_at=clock.now)
        for run in d.tick():
            ends[run.run_id] = step + 10
            if run.user_id == 2:
                waits.append(step - run.run_id)
        assert sum(1 for run_id in ends if run_id >= 1000) <= 6  # slots - headroom
    assert waits == [0] * 7
    assert sum(1 for r in sent if r.user_id == 1) >= 100  # ~6 slots x 20 s of 1 s runs


def test_batch_is_dispatched_only_when_the_engines_are_idle(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(6):
        store.push(q(i + 1, 1, tier="batch"))
    samples = [EngineSample(slots=8, running=5, waiting=0, tpot_s=0.2, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    assert d.tick() == []
    samples[0] = EngineSample(slots=8, running=1, waiting=0, tpot_s=0.2, updated_at=clock.now)
    assert len(d.tick()) == 3  # up to half the slots busy


def test_runs_cancelled_while_queued_are_never_dispatched(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(4):
        store.push(q(i + 1, 1))
    store.remove(2)
    samples = [EngineSample(slots=32, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    make_dispatcher(store, samples, sent, clock).tick()
    assert [r.run_id for r in sent] == [1, 3, 4]


def test_send_failure_puts_the_run_back(store: QueueStore) -> None:
    clock = FakeClock()
    store.push(q(1, 1))

    def broken(_run: QueuedRun) -> None:
        raise ConnectionError("broker down")

    d = Dispatcher(
        store=store, policy=FairPolicy(SPECS), gate=GATE, settings=SETTINGS, stats=lambda: [], send=broken, clock=clock
    )
    assert d.tick() == []
    assert store.queue_depth("free") == 1 and store.in_flight(now=clock.now, ttl_s=3600).total == 0


def test_a_tick_sends_its_runs_in_one_batch_and_puts_back_those_not_sent(store: QueueStore) -> None:
    clock = FakeClock()
    for i in range(4):
        store.push(q(i + 1, user=i % 2))
    batches: list[list[int]] = []

    def send_batch(runs: list[QueuedRun]) -> list[QueuedRun]:
        batches.append([r.run_id for r in runs])
        return [r for r in runs if r.run_id == 2]  # the broker refused run 2

    samples = [EngineSample(slots=32, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(store, samples, [], clock, send_batch=send_batch)
    sent = d.tick()
    assert len(batches) == 1 and sorted(batches[0]) == [1, 2, 3, 4]  # one batch for the tick
    assert sorted(r.run_id for r in sent) == [1, 3, 4]
    assert store.queue_depth("free") == 1 and store.heads()["free"][1].run_id == 2  # back in its queue
    assert store.in_flight(now=clock.now, ttl_s=3600).total == 3
    # Its user was refunded its charge: it is not behind the other for a run it never got.
    assert d.policy.counter("free", 1) == d.policy.counter("free", 0) - q(2, 1).cost


def test_a_tick_reads_every_head_once_and_then_takes_the_dispatched_users_next_from_the_claim(
    store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading every backlogged user's head after each decision cost a round trip per user per decision (11.6 ms of
    CPU a decision with 200 users, bench/dispatcher_ceiling.py); the tick reads them once, and each claim returns
    the next head of the user it dispatched, and the tick still serves the users in the policy's order."""
    clock = FakeClock()
    for user in range(20):
        for k in range(3):
            store.push(q(100 * user + k + 1, user))
    calls: Counter[str] = Counter()
    for name in ("begin_tick", "heads", "claim", "claim_and_peek"):
        real = getattr(store, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kwargs: object) -> object:
            calls[_name] += 1
            return _real(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(store, name, counted)
    sent: list[QueuedRun] = []
    samples = [EngineSample(slots=1000, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    d.settings = replace(SETTINGS, max_per_tick=30)
    d.tick()
    # The heads come with the tick's first read: Redis's script reads them, the memory store calls heads() for it.
    heads_apart = 0 if isinstance(store, RedisQueueStore) else 1
    assert len(sent) == 30 and calls["begin_tick"] == 1 and calls["heads"] == heads_apart
    assert calls["claim_and_peek"] == 30
    # Round robin by counter: every user once before anyone twice, each user's runs in their order.
    assert sorted(r.user_id for r in sent[:20]) == list(range(20))
    assert all(r.run_id % 100 == 2 for r in sent[20:]) and all(r.run_id % 100 == 1 for r in sent[:20])


def test_a_decision_costs_one_redis_round_trip(redis_store: RedisQueueStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a decision adds to a tick on Redis: the claim script, which also returns the user's next head. Counted
    as the commands (or pipelines) the client sends, from the difference between a tick of 40 decisions and one of
    10, so the tick's fixed reads (lock, policy, load, heads, positions) cancel out."""
    import redis.connection

    sends = Counter[str]()
    real_send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: redis.connection.AbstractConnection, command: object, check_health: bool = True) -> None:
        sends["round trips"] += 1
        real_send(self, command, check_health)  # type: ignore[arg-type]

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)

    def round_trips(decisions: int) -> int:
        redis_store.client.flushdb()
        clock, sent = FakeClock(), list[QueuedRun]()
        for user in range(20):
            for k in range(3):
                redis_store.push(q(100 * user + k + 1, user))
        samples = [EngineSample(slots=1000, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
        d = make_dispatcher(redis_store, samples, sent, clock)
        d.settings = replace(SETTINGS, max_per_tick=decisions)
        d.tick()  # (loads the scripts)
        redis_store.client.flushdb()
        for user in range(20):
            for k in range(3):
                redis_store.push(q(100 * user + k + 1, user))
        sent.clear()
        before = sends["round trips"]
        d.tick()
        assert len(sent) == decisions
        return sends["round trips"] - before

    assert (round_trips(40) - round_trips(10)) / 30 == 1.0


def test_a_ticks_first_read_is_one_round_trip(redis_store: RedisQueueStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock, the policy's state, the refunds, the runs in flight and every backlogged user's head come in one
    script: a tick that dispatches one run sends three commands to Redis (that read, the claim, the policy's save;
    the engine statistics are the caller's), where the lock, the policy, the refunds, the runs in flight and the
    heads' three pipelines were seven before the claim."""
    import redis.connection

    sends: list[bytes] = []
    real_send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: redis.connection.AbstractConnection, command: object, check_health: bool = True) -> None:
        sends.append(bytes(command[0] if isinstance(command, list) else command)[:40])  # type: ignore[arg-type,index]
        real_send(self, command, check_health)  # type: ignore[arg-type]

    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [EngineSample(slots=1000, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(redis_store, samples, sent, clock)
    d.settings = replace(SETTINGS, positions_interval_s=3600.0)
    redis_store.push(q(1, 7))
    d.tick()  # (loads the scripts, and the positions' first refresh)
    redis_store.push(q(2, 8))
    redis_store.add_refund(tier="free", user_id=8, amount=5.0)
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    d.tick()
    monkeypatch.undo()
    assert [r.run_id for r in sent] == [1, 2]
    assert len(sends) == 3, sends
    assert redis_store.take_refunds() == []  # taken by the tick's read


def test_a_backlog_of_more_users_than_the_first_read_takes_is_read_apart(
    redis_store: RedisQueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``TICK_HEADS_MAX_USERS`` backlogged users the script leaves the heads out (it must not hold Redis's one
    thread for long), and the tick reads them pipelined: the same decisions."""
    from scheduling import redis_store as module

    monkeypatch.setattr(module, "TICK_HEADS_MAX_USERS", 3)
    for user in range(5):
        redis_store.push(q(user + 1, user))
    start = redis_store.begin_tick(None, ttl_ms=1000, now=1.0, in_flight_ttl_s=60.0)
    assert start is not None and start.heads is None
    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [EngineSample(slots=1000, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    make_dispatcher(redis_store, samples, sent, clock).tick()
    assert sorted(r.run_id for r in sent) == [1, 2, 3, 4, 5]


def test_queue_positions_and_estimated_wait(redis_store: RedisQueueStore) -> None:
    store = redis_store
    clock, sent, reported = FakeClock(), list[QueuedRun](), list[dict[int, Position]]()
    for i in range(3):
        store.push(q(i + 1, 1))
    store.push(q(9, 2, tier="pro"))
    d = make_dispatcher(store, [], sent, clock)  # no stats and cap 3: one run stays queued
    d.on_positions = reported.append
    store.client.zadd("sched:inflight", {"900": clock.now, "901": clock.now})
    d.tick()
    assert [r.run_id for r in sent] == [9]
    positions = store.positions([1, 2, 3, 9])
    assert [positions[i].queue_position for i in (1, 2, 3)] == [1, 2, 3]
    assert store.position(9) is None and 9 not in positions  # dispatched
    assert set(reported[-1]) == {1, 2, 3}
    # One dispatch seen in the rate window (at least a quarter of 60 s): 1/15 runs per second.
    assert [positions[i].estimated_wait_s for i in (1, 3)] == [15.0, 45.0]
    # Unchanged positions are not reported again.
    reported.clear()
    d.refresh_positions()
    assert reported == []


@pytest.mark.parametrize("use_lock", [True, False])
def test_two_dispatchers_never_dispatch_the_same_run(redis_store: RedisQueueStore, use_lock: bool) -> None:
    store = redis_store
    runs = [q(i + 1, user=i % 7, tier=TIERS[i % 3]) for i in range(300)]
    for r in runs:
        store.push(r)
    sent: list[QueuedRun] = []
    lock = threading.Lock()

    def send(run: QueuedRun) -> None:
        with lock:
            sent.append(run)

    big = [EngineSample(slots=100_000, running=0, waiting=0, tpot_s=None, updated_at=9e9)]
    settings = DispatcherSettings(
        stale_after_s=1e12,
        in_flight_ttl_s=1e12,
        tick_s=0.001,
        positions_interval_s=1e9,
        leader_ttl_ms=200,
        max_per_tick=5,
    )
    dispatchers = [
        Dispatcher(
            store=RedisQueueStore(store.client, tiers=TIERS),
            policy=FairPolicy(SPECS),
            gate=GATE,
            settings=settings,
            stats=lambda: big,
            send=send,
            use_leader_lock=use_lock,
        )
        for _ in range(2)
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=d.run_forever, args=(stop,)) for d in dispatchers]
    for t in threads:
        t.start()
    for _ in range(500):
        if len(sent) >= len(runs):
            break
        stop.wait(0.02)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    counts = Counter(r.run_id for r in sent)
    assert len(sent) == len(runs)
    assert max(counts.values()) == 1


def test_refunds_of_ended_runs_reach_the_counters(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    store.push(q(1, 1, cost=300))
    store.push(q(2, 2, cost=300))
    samples = [EngineSample(slots=32, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    d.tick()
    assert d.policy.counter("free", 1) == d.policy.counter("free", 2) == 300
    store.add_refund(tier="free", user_id=1, amount=250)  # its run produced 250 tokens fewer than max_tokens
    store.push(q(3, 1, cost=100))
    store.push(q(4, 2, cost=100))
    store.push(q(5, 1, cost=100))
    d.tick()
    # User 1's counter is 50 against user 2's 300: it goes twice first. Without the refund: 3, 4, 5.
    assert [r.run_id for r in sent[2:]] == [3, 5, 4]
    assert store.take_refunds() == []


def test_an_idle_dispatcher_is_woken_by_a_new_run_instead_of_sleeping_its_tick(redis_store: RedisQueueStore) -> None:
    store = redis_store
    assert store.wait_for_work(0.01) is False  # nothing queued: it times out
    store.push(q(1, user=1))
    assert store.wait_for_work(5) is True  # the push left a wake token...
    assert store.wait_for_work(0.01) is False  # ...just one

    sent: list[QueuedRun] = []
    big = [EngineSample(slots=100, running=0, waiting=0, tpot_s=None, updated_at=9e9)]
    slow_tick = DispatcherSettings(
        stale_after_s=1e12, in_flight_ttl_s=1e12, tick_s=30.0, positions_interval_s=1e9, leader_ttl_ms=60_000
    )
    dispatcher = Dispatcher(
        store=store,
        policy=FairPolicy(SPECS),
        gate=GATE,
        settings=slow_tick,
        stats=lambda: big,
        send=sent.append,
    )
    stop = threading.Event()
    thread = threading.Thread(target=dispatcher.run_forever, args=(stop,))
    thread.start()
    try:
        for _ in range(100):  # the first tick dispatches run 1, then the loop idles for up to 30 s
            if sent:
                break
            stop.wait(0.02)
        assert [r.run_id for r in sent] == [1]
        store.push(q(2, user=2))
        for _ in range(250):  # well under the 30 s tick: only the wake-up can explain it
            if len(sent) == 2:
                break
            stop.wait(0.02)
        assert [r.run_id for r in sent] == [1, 2]
    finally:
        stop.set()
        store.push(q(3, user=3))  # wakes it so it sees the stop at once
        thread.join(timeout=10)
    assert not thread.is_alive()
    store.client.delete("sched:wake")
    assert store.remove(2) == 2  # a run in flight ends: its freed slot wakes the dispatcher too
    assert store.wait_for_work(0.01) is True


def test_engine_priority_puts_tier_order_first_then_the_users_standing() -> None:
    # Band 0 below the slot share, 1 from 1x to 2x it, ... capped at band 9; tiers ten apart.
    assert [engine_priority(tier_priority=2, in_flight=n, share=4.0) for n in (0, 3, 4, 7, 8, 100)] == [
        20,
        20,
        21,
        21,
        22,
        29,
    ]
    assert engine_priority(tier_priority=0, in_flight=100, share=4.0) < engine_priority(
        tier_priority=1, in_flight=0, share=4.0
    )


def test_a_user_below_their_share_is_sent_at_a_better_vllm_priority_than_a_flood(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    for i in range(6):  # the flood: six runs already in flight
        store.push(q(100 + i, 1))
        assert store.claim(q(100 + i, 1), now=clock.now - 10)
    store.push(q(200, 1))
    store.push(q(300, 2))
    samples = [EngineSample(slots=16, running=6, waiting=0, tpot_s=0.1, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    d.tick()
    by_user = {r.user_id: r.engine_priority for r in sent}
    # 16 slots / (2 users + 1) = 5.3 each: the light user (nothing in flight) is band 0, the flood (6) band 1.
    assert by_user == {2: 20, 1: 21}


def test_the_headroom_goes_to_a_user_short_of_slots_only_if_not_ahead_on_tokens(store: QueueStore) -> None:
    """At the headroom's edge a user below their slot share may pass, but not one more than two requests' cost ahead
    on tokens: else the slots, not the tokens, would be shared (a user of long prompts served more tokens)."""
    clock = FakeClock()
    gate = GatePolicy(gates=GATE.gates, fallback_max_in_flight=3, idle_running_fraction=0.5, headroom_slots=4)
    for i in range(3):  # the user of short requests holds 3 slots, the one of long requests 1
        store.push(q(100 + i, 2, cost=30))
        assert store.claim(q(100 + i, 2, cost=30), now=clock.now - 10)
    store.push(q(200, 1, cost=300))
    assert store.claim(q(200, 1, cost=300), now=clock.now - 10)
    store.push(q(201, 1, cost=300))
    store.push(q(101 + 10, 2, cost=30))

    def tick_with(counter_long: float) -> list[QueuedRun]:
        state = {"tiers": {"free": {"counters": {"1": counter_long, "2": 90.0}, "active": [1, 2], "vtime": 90.0}}}
        store.save_policy(state)
        sent: list[QueuedRun] = []
        # 4 of 8 slots taken: the edge of the 4 headroom slots, where only users short of their share pass.
        samples = [EngineSample(slots=8, running=4, waiting=0, tpot_s=0.1, updated_at=clock.now)]
        d = Dispatcher(
            store=store,
            policy=FairPolicy(SPECS),
            gate=gate,
            settings=SETTINGS,
            stats=lambda: samples,
            send=sent.append,
            clock=clock,
            use_leader_lock=False,  # a fresh dispatcher per case
        )
        d.tick()
        return sent

    # 710 tokens ahead of the other user, more than two requests (2 x 300): no headroom for it, nor for the user
    # at its share.
    assert HEADROOM_TOKEN_ALLOWANCE == 2
    assert tick_with(800.0) == []
    # 510 ahead (less than two of the largest requests: a light user sending two prompts at once): headroom slot.
    assert [r.run_id for r in tick_with(600.0)] == [201]


def test_a_standby_dispatcher_leaves_the_wake_up_to_the_leader(redis_store: RedisQueueStore) -> None:
    """BLPOP hands a wake to one waiter: a standby that took it would leave the leader asleep for a whole tick."""
    store = redis_store
    leader_token = store.new_lock_token()
    assert store.acquire_or_renew_leadership(leader_token, ttl_ms=60_000)
    sent: list[QueuedRun] = []
    standby = Dispatcher(
        store=store,
        policy=FairPolicy(SPECS),
        gate=GATE,
        settings=DispatcherSettings(
            stale_after_s=1e12, in_flight_ttl_s=1e12, tick_s=0.05, positions_interval_s=1e9, leader_ttl_ms=60_000
        ),
        stats=lambda: [EngineSample(slots=100, running=0, waiting=0, tpot_s=None, updated_at=9e9)],
        send=sent.append,
    )
    store.push(q(1, user=1))
    assert standby.tick() == [] and not standby.leading
    standby._idle(threading.Event())
    assert store.wait_for_work(0.01) is True  # the push's wake is still there for the leader
    store.release_leadership(leader_token)
    assert [r.run_id for r in standby.tick()] == [1] and standby.leading
    store.client.delete("sched:wake")


@pytest.mark.parametrize("seed", range(4))
def test_a_tick_decides_exactly_as_one_decision_after_another(store: QueueStore, seed: int) -> None:
    """The tick keeps the users in the policy's order across its decisions (``OrderedHeads``), the slot share and
    the headroom's lowest counter and largest cost with it, and syncs the policy only when a user leaves the
    backlog: with room for every run, it must send exactly what deciding one run at a time sends."""
    policy, queues = random_backlog(seed, users=3 + 20 * seed, runs=240)
    reference = copy.deepcopy(policy)
    expected = [r.run_id for r in _decide_one_at_a_time(reference, copy.deepcopy(queues))]
    for run in sorted(queues.runs(), key=lambda r: r.run_id):
        assert store.push(run)
    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [EngineSample(slots=100_000, running=0, waiting=0, tpot_s=None, updated_at=clock.now)]
    d = make_dispatcher(store, samples, sent, clock)
    d.policy = policy
    d.settings = replace(SETTINGS, max_per_tick=len(expected))
    d.tick()
    assert len(expected) == 120 and [r.run_id for r in sent] == expected
    assert d.policy.to_dict() == reference.to_dict()  # the counters, virtual times and floor credit it keeps


def _decide_one_at_a_time(policy: FairPolicy, queues: UserQueues) -> list[QueuedRun]:
    out = []
    while (run := dispatch_one(policy, queues, lambda _tier, _run: True)) is not None:
        out.append(run)
    return out
