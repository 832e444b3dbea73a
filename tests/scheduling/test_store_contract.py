"""The ``QueueStore`` contract, asserted the same way against both stores: Redis (the Lua scripts) and memory
(the ``store`` fixture of ``tests/scheduling/conftest.py`` runs each test over both).

The in-memory store stands in for Redis wherever the dispatcher runs without it (tests, the virtual-time
benchmark), so any behaviour it does not share would make those figures wrong without a failing test.
"""

from __future__ import annotations

import time

import redis

from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import QueuedRun
from scheduling.redis_store import RedisQueueStore
from scheduling.store import INFLIGHT_USERS_KEY, RATE_KEY, InFlight, InFlightRun, Position, QueueStore

TIERS = ["pro", "plus", "free", "batch"]


def rate(store: QueueStore) -> float | None:
    """The dispatch rate as the token bucket's script reads it (from Redis; the memory store keeps it for tests)."""
    if isinstance(store, RedisQueueStore):
        raw = store.client.get(RATE_KEY)
        return float(raw) if raw is not None else None
    assert isinstance(store, MemoryQueueStore)
    return store.rate()


def q(run_id: int, user: int, tier: str = "free", cost: int = 100, weight: float = 1.0) -> QueuedRun:
    return QueuedRun(run_id=run_id, user_id=user, tier=tier, cost=cost, weight=weight, enqueued_at=float(run_id))


def ids(heads: dict[str, dict[int, QueuedRun]]) -> dict[str, dict[int, int]]:
    return {tier: {user: run.run_id for user, run in users.items()} for tier, users in heads.items()}


def test_both_stores_are_queue_stores(clean_redis: redis.Redis) -> None:
    stores: list[QueueStore] = [RedisQueueStore(clean_redis, tiers=TIERS), MemoryQueueStore(tiers=TIERS)]
    assert [s.tiers for s in stores] == [TIERS, TIERS]


def test_push_is_idempotent_and_queues_behind_the_users_other_runs(store: QueueStore) -> None:
    assert store.push(q(1, 10))
    assert not store.push(q(1, 10))
    assert store.push(q(2, 10))
    assert store.push(q(3, 11, tier="pro", cost=250, weight=2.5))
    assert (store.queue_depth("free"), store.queue_depth("pro"), store.queue_depth("plus")) == (2, 1, 0)
    assert ids(store.heads()) == {"free": {10: 1}, "pro": {11: 3}}
    assert store.heads()["pro"][11] == q(3, 11, tier="pro", cost=250, weight=2.5)  # cost, weight, enqueue time kept
    assert store.is_queued_or_in_flight(1, "free") and not store.is_queued_or_in_flight(1, "pro")
    assert not store.is_queued_or_in_flight(99, "free")


def test_a_run_pushed_without_an_enqueue_time_gets_the_current_time(store: QueueStore) -> None:
    before = time.time()
    store.push(QueuedRun(run_id=1, user_id=10, tier="free", cost=100))
    assert before <= store.heads()["free"][10].enqueued_at <= time.time()


def test_all_queued_lists_every_run_in_queue_order(store: QueueStore) -> None:
    for run in (q(1, 10), q(2, 11), q(3, 10), q(4, 10, tier="pro"), q(5, 11)):
        store.push(run)
    queues = store.all_queued()
    assert len(queues) == 5
    assert ids(queues.heads()) == {"free": {10: 1, 11: 2}, "pro": {10: 4}}
    assert queues.remove(q(1, 10)) and queues.heads()["free"][10] == q(3, 10)


def test_only_the_head_of_a_users_queue_can_be_claimed_and_only_once(store: QueueStore) -> None:
    store.push(q(1, 10))
    store.push(q(2, 10))
    assert not store.claim(q(2, 10), now=100.0)  # behind run 1
    assert not store.claim(q(1, 11), now=100.0)  # not in that user's queue
    assert not store.claim(q(1, 10, tier="pro"), now=100.0)  # nor in that tier
    assert store.claim(q(1, 10), now=100.0)
    assert not store.claim(q(1, 10), now=100.0)  # a second dispatcher loses
    assert ids(store.heads()) == {"free": {10: 2}}
    assert store.queue_depth("free") == 1
    assert store.is_queued_or_in_flight(1, "free")  # in flight now
    assert store.claim(q(2, 10), now=101.0)
    assert store.heads() == {} and store.queue_depth("free") == 0
    assert not store.claim(q(3, 10), now=101.0)  # never queued


def test_claim_and_peek_claims_as_claim_does_and_returns_the_users_next_run(store: QueueStore) -> None:
    store.push(q(1, 10))
    store.push(QueuedRun(run_id=2, user_id=10, tier="free", cost=250, weight=2.5, enqueued_at=7.0, deployment="m@v2"))
    store.push(q(3, 11))
    assert store.claim_and_peek(q(2, 10), now=100.0) == (False, None)  # behind run 1: nothing taken
    assert store.claim_and_peek(q(1, 10), now=100.0) == (
        True,
        QueuedRun(run_id=2, user_id=10, tier="free", cost=250, weight=2.5, enqueued_at=7.0, deployment="m@v2"),
    )
    assert store.claim_and_peek(q(1, 10), now=100.0) == (False, None)  # a second dispatcher loses
    assert store.in_flight(now=100.0, ttl_s=3600).per_user == {10: 1}
    assert ids(store.heads()) == {"free": {10: 2, 11: 3}}
    assert store.remove(2) == 1
    assert store.claim_and_peek(q(3, 11), now=101.0) == (True, None)  # user 11 had nothing else queued
    assert store.heads() == {} and store.queue_depth("free") == 0


def test_a_runs_chat_affinity_target_is_kept_while_it_is_queued(store: QueueStore) -> None:
    """The chat's last worker, which the dispatcher routes the run to without a database read, comes back with the
    run from every read of the queue (and a run queued without one has none)."""
    pinned = QueuedRun(run_id=1, user_id=10, tier="free", cost=100, enqueued_at=1.0, last_worker="gpu-a@host")
    follower = QueuedRun(run_id=2, user_id=10, tier="free", cost=100, enqueued_at=2.0, last_worker="gpu-b@host")
    store.push(pinned)
    store.push(follower)
    store.push(q(3, 11))
    assert store.heads()["free"] == {10: pinned, 11: q(3, 11)} and q(3, 11).last_worker == ""
    queued = store.all_queued().heads()["free"]
    assert {user: run.last_worker for user, run in queued.items()} == {10: "gpu-a@host", 11: ""}
    assert store.claim_and_peek(pinned, now=100.0) == (True, follower)
    store.push(pinned, front=True)  # sent back (its send failed): still pinned
    assert store.heads()["free"][10] == pinned


def test_remove_says_where_the_run_was(store: QueueStore) -> None:
    store.push(q(1, 10))
    store.push(q(2, 10))
    store.push(q(3, 11))
    assert store.claim(q(1, 10), now=100.0)
    assert store.remove(2) == 1  # queued: it leaves the queue
    assert store.remove(2) == 0
    assert ids(store.heads()) == {"free": {11: 3}}  # user 10 has nothing queued: out of the backlog
    assert store.queue_depth("free") == 1
    assert not store.claim(q(2, 10), now=100.0)  # a cancelled run is never dispatched
    assert store.remove(1) == 2  # in flight: it ended
    assert store.remove(1) == 0
    assert not store.is_queued_or_in_flight(1, "free") and not store.is_queued_or_in_flight(2, "free")
    assert store.in_flight(now=100.0, ttl_s=60).total == 0


def test_in_flight_counts_per_user_and_since_a_time(store: QueueStore) -> None:
    for run in (q(1, 10), q(2, 11), q(3, 11), q(4, 10, tier="pro")):
        store.push(run)
    assert store.claim(q(1, 10), now=100.0)
    assert store.claim(q(2, 11), now=105.0)
    assert store.claim(q(3, 11), now=110.0)
    assert store.claim(q(4, 10, tier="pro"), now=110.0)
    assert store.in_flight(now=110.0, ttl_s=60) == InFlight(
        total=4, recent=0, per_user={10: 2, 11: 2}, per_deployment={"": 4}
    )
    assert store.in_flight(now=110.0, ttl_s=60, since=105.0).recent == 3  # at or after ``since``
    assert store.in_flight(now=110.0, ttl_s=60, since=110.5).recent == 0
    store.remove(3)
    assert store.in_flight(now=110.0, ttl_s=60, since=105.0) == InFlight(
        total=3, recent=2, per_user={10: 2, 11: 1}, per_deployment={"": 3}, recent_per_deployment={"": 2}
    )


def test_in_flight_runs_lists_each_run_with_its_user_tier_deployment_and_dispatch_time(store: QueueStore) -> None:
    store.push(q(1, 10))
    store.push(QueuedRun(run_id=2, user_id=11, tier="pro", cost=50, enqueued_at=2.0, deployment="m@v2"))
    store.push(q(3, 12))
    assert store.claim(QueuedRun(run_id=2, user_id=11, tier="pro", cost=50, deployment="m@v2"), now=105.0)
    assert store.claim(q(1, 10), now=100.0)
    assert store.in_flight_runs() == [InFlightRun(1, 10, "free", "", 100.0), InFlightRun(2, 11, "pro", "m@v2", 105.0)]
    store.remove(1)
    assert [r.run_id for r in store.in_flight_runs()] == [2]


def test_a_run_in_flight_recorded_without_its_tier_counts_and_is_listed_with_none(
    redis_store: RedisQueueStore,
) -> None:
    """Entries written before the tier was recorded (``{user}|{deployment}``) still count, with tier ""."""
    redis_store.push(q(1, 10))
    assert redis_store.claim(q(1, 10), now=100.0)
    redis_store.client.hset(INFLIGHT_USERS_KEY, "1", "10|m@v1")
    assert redis_store.in_flight(now=100.0, ttl_s=60).per_deployment == {"m@v1": 1}
    assert redis_store.in_flight_runs() == [InFlightRun(1, 10, "", "m@v1", 100.0)]


def test_a_run_pushed_to_the_front_goes_ahead_of_its_users_other_runs(store: QueueStore) -> None:
    """A run handed back mid-answer (a preemption, a drain) goes on before the user's runs sent after it."""
    store.push(q(1, 10))
    store.push(q(2, 10))
    assert store.claim(q(1, 10), now=100.0)
    store.push(q(3, 10))
    assert store.push(q(1, 10), front=True)
    assert store.in_flight(now=100.0, ttl_s=60).total == 0
    assert [r.run_id for r in store.all_queued().runs()] == [1, 2, 3]
    assert not store.push(q(1, 10), front=True)  # idempotent as a push behind


def test_runs_in_flight_longer_than_the_ttl_are_reclaimed(store: QueueStore) -> None:
    for i in (1, 2, 3):
        store.push(q(i, 10 + i))
    assert store.claim(q(1, 11), now=100.0)
    assert store.claim(q(2, 12), now=150.0)
    assert store.claim(q(3, 13), now=200.0)
    assert store.in_flight(now=250.0, ttl_s=100) == InFlight(
        total=2, recent=0, per_user={12: 1, 13: 1}, per_deployment={"": 2}
    )  # 150 stays
    assert store.remove(1) == 0  # reclaimed: its late "run ended" finds nothing
    assert not store.is_queued_or_in_flight(1, "free")
    assert store.in_flight(now=250.0, ttl_s=100).per_user == {12: 1, 13: 1}
    assert store.in_flight(now=1000.0, ttl_s=100) == InFlight(total=0, recent=0, per_user={})


def test_pushing_a_run_in_flight_sends_it_back_to_its_queue(store: QueueStore) -> None:
    """The dispatcher's path when ``send`` fails: remove, then push again."""
    store.push(q(1, 10))
    assert store.claim(q(1, 10), now=100.0)
    assert store.push(q(1, 10))
    assert store.in_flight(now=100.0, ttl_s=60).total == 0
    assert ids(store.heads()) == {"free": {10: 1}}
    assert store.remove(1) == 1


def test_positions_are_replaced_as_a_whole_and_dropped_on_dispatch_or_removal(store: QueueStore) -> None:
    for i in (1, 2, 3):
        store.push(q(i, 10 + i))
    store.write_positions({1: Position(1, 15.0), 2: Position(2, 30.0), 3: Position(3, None)})
    assert [store.position(i) for i in (1, 2, 3)] == [Position(1, 15.0), Position(2, 30.0), Position(3, None)]
    assert store.positions([3, 1, 7]) == {3: Position(3, None), 1: Position(1, 15.0)}  # one read; 7 has none
    assert store.positions([]) == {}
    assert store.claim(q(1, 11), now=100.0)
    assert store.remove(2) == 1
    assert [store.position(i) for i in (1, 2, 3)] == [None, None, Position(3, None)]
    store.write_positions({3: Position(1, 2.5)})
    assert store.position(3) == Position(1, 2.5)
    store.write_positions({})
    assert store.position(3) is None


def test_refunds_add_up_per_tier_and_user_until_taken(store: QueueStore) -> None:
    assert store.take_refunds() == []
    store.add_refund(tier="free", user_id=1, amount=100.0)
    store.add_refund(tier="free", user_id=1, amount=50.5)
    store.add_refund(tier="pro", user_id=1, amount=20.0)
    store.add_refund(tier="free", user_id=2, amount=0.0)  # nothing to give back
    store.add_refund(tier="free", user_id=3, amount=-5.0)
    assert sorted(store.take_refunds()) == [("free", 1, 150.5), ("pro", 1, 20.0)]
    assert store.take_refunds() == []


def test_policy_state_and_rate_round_trip(store: QueueStore) -> None:
    assert store.load_policy() == {}
    state = {"tiers": {"free": {"counters": {"1": 300.0}, "active": [1], "vtime": 0.0}}, "seq": 3}
    store.save_policy(state)
    assert store.load_policy() == state
    assert rate(store) is None
    store.write_rate(1 / 3)
    assert rate(store) == 0.333333  # six decimals, as admission reads it


def test_begin_tick_reads_what_the_five_reads_would_and_takes_the_refunds(store: QueueStore) -> None:
    """The tick's first read: the lock (taken, or None with nothing read or taken when another token holds it),
    the policy's state, the refunds (taken), the runs in flight (those past the TTL reclaimed) and the heads."""
    store.save_policy({"vtc": {"free": 3.0}})
    store.add_refund(tier="free", user_id=10, amount=4.0)
    for run in (q(1, 10), q(2, 10), q(3, 11, tier="pro"), q(4, 12), q(5, 13)):
        store.push(run)
    assert store.claim(q(4, 12), now=50.0) and store.claim(q(5, 13), now=100.0)
    assert store.acquire_or_renew_leadership("other", ttl_ms=10_000)
    assert store.begin_tick("mine", ttl_ms=10_000, now=120.0, in_flight_ttl_s=60.0) is None
    assert store.take_refunds() == [("free", 10, 4.0)]  # nothing was taken by the refused read
    store.add_refund(tier="free", user_id=10, amount=4.0)
    store.release_leadership("other")
    heads = store.heads()

    start = store.begin_tick("mine", ttl_ms=10_000, now=120.0, in_flight_ttl_s=60.0)

    assert start is not None and not store.acquire_or_renew_leadership("other", ttl_ms=10_000)  # the lock is mine
    assert start.policy == {"vtc": {"free": 3.0}} and start.refunds == [("free", 10, 4.0)]
    assert store.take_refunds() == []
    assert start.heads == heads and ids(heads) == {"free": {10: 1}, "pro": {11: 3}}
    # Run 4 was sent 70 s before: reclaimed. Run 5 is in flight, recent since 100.
    assert start.in_flight(100.0) == InFlight(
        total=1, recent=1, per_user={13: 1}, per_deployment={"": 1}, recent_per_deployment={"": 1}
    )
    assert store.in_flight(now=120.0, ttl_s=60.0).total == 1
    if isinstance(store, RedisQueueStore):  # the reclaimed run's owner entry went with it
        assert store.client.hkeys(INFLIGHT_USERS_KEY) == ["5"]
    assert store.begin_tick(None, ttl_ms=10_000, now=120.0, in_flight_ttl_s=60.0) is not None  # no lock asked


def test_the_leader_lock_is_held_by_one_token_until_released_or_expired(store: QueueStore) -> None:
    a, b = store.new_lock_token(), store.new_lock_token()
    assert a != b
    assert store.acquire_or_renew_leadership(a, ttl_ms=10_000)
    assert store.acquire_or_renew_leadership(a, ttl_ms=10_000)  # renewed
    assert not store.acquire_or_renew_leadership(b, ttl_ms=10_000)
    store.release_leadership(b)  # not its lock: nothing happens
    assert not store.acquire_or_renew_leadership(b, ttl_ms=10_000)
    store.release_leadership(a)
    assert store.acquire_or_renew_leadership(b, ttl_ms=50)
    assert not store.acquire_or_renew_leadership(a, ttl_ms=10_000)
    time.sleep(0.1)  # b's lock expired (a dispatcher that died)
    assert store.acquire_or_renew_leadership(a, ttl_ms=10_000)


def test_a_push_or_a_freed_slot_leaves_one_wake_up(store: QueueStore) -> None:
    assert store.wait_for_work(0.01) is False
    store.push(q(1, 10))
    store.push(q(2, 11))
    assert store.wait_for_work(0.01) is True
    assert store.wait_for_work(0.01) is False  # two pushes, one wake-up
    assert not store.push(q(1, 10))  # already queued: nothing new to dispatch
    assert store.wait_for_work(0.01) is False
    assert store.claim(q(1, 10), now=100.0)
    assert store.remove(2) == 1  # a cancel frees no slot
    assert store.wait_for_work(0.01) is False
    assert store.remove(1) == 2  # a run ended: its slot is free
    assert store.wait_for_work(0.01) is True


def test_push_claim_remove(store: QueueStore) -> None:
    assert store.push(q(1, 10)) and not store.push(q(1, 10))  # idempotent
    store.push(q(2, 10))
    store.push(q(3, 11, tier="pro"))
    assert store.queue_depth("free") == 2
    heads = store.heads()
    assert {t: {u: r.run_id for u, r in users.items()} for t, users in heads.items()} == {
        "free": {10: 1},
        "pro": {11: 3},
    }
    assert not store.claim(q(2, 10))  # not the head
    assert store.claim(q(1, 10)) and not store.claim(q(1, 10))
    assert store.in_flight(now=2e9, ttl_s=1e10) == InFlight(total=1, recent=0, per_user={10: 1}, per_deployment={"": 1})
    assert store.remove(2) == 1  # a queued run leaves the queue at once
    assert store.heads() == {"pro": {11: q(3, 11, tier="pro")}}
    assert store.queue_depth("free") == 0
    assert store.remove(1) == 2 and store.remove(1) == 0  # the in-flight one ended


def test_run_end_in_the_web_process_refunds_the_counter_only_for_dispatched_runs(store: QueueStore) -> None:
    store.push(q(1, 1))
    assert store.remove(1) == 1  # cancelled while queued: never charged, nothing to refund
    store.push(q(2, 1))
    assert store.claim(q(2, 1))
    assert store.remove(2) == 2


def test_heads_read_only_the_stores_tiers(clean_redis: redis.Redis) -> None:
    stores: list[QueueStore] = [RedisQueueStore(clean_redis, tiers=["free"]), MemoryQueueStore(tiers=["free"])]
    for s in stores:
        s.push(q(1, 10, tier="free"))
        s.push(q(2, 10, tier="other"))
        assert ids(s.heads()) == {"free": {10: 1}}
        assert len(s.all_queued()) == 1
        assert s.queue_depth("other") == 1 and s.remove(2) == 1
