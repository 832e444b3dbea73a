"""Preemption (``GatePolicy.preempt``): the headroom lent to a user alone on the engines, and taken back for a
second user by asking one of the first user's runs to yield; kept again while both are active. Over both queue
stores, with a fake clock and a fake engine; the worker's side (the hand-off) is in
``tests/inference_workers/test_continuation.py``."""

from __future__ import annotations

from dataclasses import replace

from scheduling.dispatcher import PREEMPT_MIN_AGE_S, Dispatcher
from scheduling.gate import EngineSample, GatePolicy
from scheduling.policy import QueuedRun
from scheduling.store import QueueStore
from tests.scheduling.test_dispatch import GATE, FakeClock, make_dispatcher, q

LENT = replace(GATE, headroom_slots=2, preempt=True)
KEPT = replace(GATE, headroom_slots=2, preempt=False)


def _dispatcher(
    store: QueueStore, gate: GatePolicy, samples: list[EngineSample], clock: FakeClock, yields: list[int]
) -> tuple[Dispatcher, list[QueuedRun]]:
    sent: list[QueuedRun] = []
    # A fresh dispatcher per case: no leader lock.
    d = make_dispatcher(store, samples, sent, clock, gate=gate, preempt=yields.extend, use_leader_lock=False)
    return d, sent


def _full_engine(store: QueueStore, clock: FakeClock, *, user: int = 1, tier: str = "free", n: int = 8) -> None:
    """``n`` runs of ``user`` in flight, sent 10 s, 9 s, ... ago (the newest last), and more of them queued."""
    for i in range(n):
        run = q(100 + i, user, tier=tier)
        store.push(run)
        assert store.claim(run, now=clock.now - 10 + i)
    for i in range(20):
        store.push(q(500 + i, user, tier=tier))


def test_a_lone_burst_gets_every_slot_when_the_headroom_is_lent(store: QueueStore) -> None:
    """One user's 8 prompts on an engine of 8 slots: kept, the headroom holds 2 of them in our queue until runs end
    (the tail at 32 against vLLM's server, which admits them all); lent, all 8 go at once."""
    for gate, expected in ((KEPT, 6), (LENT, 8)):
        for run_id in [r.run_id for r in store.in_flight_runs()]:
            store.remove(run_id)
        clock, yields = FakeClock(), list[int]()
        for i in range(8):
            store.push(q(10 * expected + i, 1))
        samples = [EngineSample(slots=8, running=0, waiting=0, tpot_s=0.1, updated_at=clock.now)]
        d, sent = _dispatcher(store, gate, samples, clock, yields)
        d.tick()
        assert len(sent) == expected and yields == []
        for i in range(8):
            store.remove(10 * expected + i)


def test_a_newcomer_to_a_full_engine_is_sent_at_once_and_the_busiest_users_newest_run_yields(
    store: QueueStore,
) -> None:
    clock, yields = FakeClock(), list[int]()
    _full_engine(store, clock)
    store.push(q(900, 2))
    # One waiting in the engine: the free tier's gate (max_waiting 1) is closed to the flood.
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, LENT, samples, clock, yields)
    d.tick()
    assert [r.run_id for r in sent] == [900]
    assert yields == [107]  # the newest of the flood's runs in flight for at least PREEMPT_MIN_AGE_S
    # Nothing changed on the engine yet (the hand-off takes a step): the run is not asked twice, and no other one
    # is taken for the same newcomer.
    d.tick()
    assert [r.run_id for r in sent] == [900] and yields == [107]


def test_without_preemption_the_newcomer_waits_for_a_run_to_end(store: QueueStore) -> None:
    clock, yields = FakeClock(), list[int]()
    _full_engine(store, clock)
    store.push(q(900, 2))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, KEPT, samples, clock, yields)
    d.tick()
    assert sent == [] and yields == []


def test_a_run_younger_than_the_minimum_age_is_not_preempted(store: QueueStore) -> None:
    """Every run of the flood was sent under PREEMPT_MIN_AGE_S ago (likely still waiting in the engine or
    prefilling): none yields, and the newcomer waits like any run (the free tier admits no one waiting here)."""
    clock, yields = FakeClock(), list[int]()
    for i in range(8):
        run = q(100 + i, 1)
        store.push(run)
        assert store.claim(run, now=clock.now - PREEMPT_MIN_AGE_S / 2)
    store.push(q(900, 2))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, LENT, samples, clock, yields)
    d.tick()
    assert sent == [] and yields == []


def test_a_run_of_a_higher_tier_is_never_preempted_for_a_lower_one(store: QueueStore) -> None:
    clock, yields = FakeClock(), list[int]()
    for i in range(8):  # a pro user holds the engine, nothing of theirs queued
        run = q(100 + i, 1, tier="pro")
        store.push(run)
        assert store.claim(run, now=clock.now - 10)
    store.push(q(900, 2, tier="free"))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, LENT, samples, clock, yields)
    d.tick()
    assert sent == [] and yields == []


def test_a_pro_newcomer_takes_its_slot_from_a_lower_tier_first(store: QueueStore) -> None:
    clock, yields = FakeClock(), list[int]()
    for i in range(7):  # a free user holds 7 of the 8 slots (more than slots - headroom), a pro user 1
        run = q(100 + i, 3, tier="free")
        store.push(run)
        assert store.claim(run, now=clock.now - 5 + i / 10)
    store.push(q(200, 1, tier="pro"))
    assert store.claim(q(200, 1, tier="pro"), now=clock.now - 10)
    store.push(q(950, 4, tier="pro"))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, LENT, samples, clock, yields)
    d.tick()
    assert [r.run_id for r in sent] == [950] and yields == [106]


def test_preemptions_outstanding_are_bounded_by_the_headroom(store: QueueStore) -> None:
    """Three newcomers at once with 2 headroom slots: two are sent with a run taken back for each; the third waits
    until a yielded run has left the engine."""
    clock, yields = FakeClock(), list[int]()
    _full_engine(store, clock)
    for user in (2, 3, 4):
        store.push(q(900 + user, user))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]
    d, sent = _dispatcher(store, LENT, samples, clock, yields)
    d.tick()
    assert len(sent) == 2 and yields == [107, 106]
    # The worker handed 107 off: it is queued again, ahead of its user's other runs, and the third newcomer goes.
    assert store.push(q(107, 1), front=True)
    clock.now += 1
    samples[0] = EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)
    d.tick()
    assert [r.user_id for r in sent[2:]] == [next(u for u in (2, 3, 4) if u not in {r.user_id for r in sent[:2]})]
    assert yields == [107, 106, 105]
    assert store.heads()["free"][1].run_id == 107


def test_a_newcomer_that_could_not_be_sent_takes_no_slot_back(store: QueueStore) -> None:
    clock, yields = FakeClock(), list[int]()
    _full_engine(store, clock)
    store.push(q(900, 2))
    samples = [EngineSample(slots=8, running=8, waiting=1, tpot_s=0.1, updated_at=clock.now)]

    def broken(run: QueuedRun) -> None:
        raise ConnectionError("broker down")

    d = make_dispatcher(store, samples, [], clock, gate=LENT, send=broken, preempt=yields.extend, use_leader_lock=False)
    d.tick()
    assert yields == []
    assert store.heads()["free"][2].run_id == 900


def test_the_headroom_is_lent_to_a_flood_alone_and_kept_once_another_user_is_active(store: QueueStore) -> None:
    """The virtual-time engine of ``test_a_chatting_user_is_dispatched_at_once_while_a_flood_holds_the_engine``
    with preemption on: 8 slots (2 of them headroom), runs of 3 s, a flood of 200 and a second user's prompt every
    3 s. Alone, the flood holds all 8 slots and the one its tier's gate lets wait in the engine. The other user's first
    prompt goes in the tick it arrives and takes one of the flood's runs back, which is handed off at the next step
    and sent again first of the flood's; from then on the headroom is kept (the flood holds 6), and the other user's
    prompts go at once with no preemption."""
    clock, yields = FakeClock(), list[int]()
    samples = [EngineSample(slots=8, running=0, waiting=0, tpot_s=0.1, updated_at=clock.now)]
    d, _sent = _dispatcher(store, LENT, samples, clock, yields)
    for i in range(200):
        store.push(q(1000 + i, user=1))
    start = clock.now
    ends: dict[int, int] = {}
    waits: list[int] = []
    peak_alone = peak_shared = 0
    handed_back: list[int] = []
    redispatched: list[int] = []
    for step in range(300):
        clock.now = start + step / 10
        for run_id in yields[len(handed_back) :]:  # the worker hands the run off within a step
            if run_id in ends:
                del ends[run_id]
                assert store.push(q(run_id, 1), front=True)
            handed_back.append(run_id)
        for run_id, end in list(ends.items()):
            if end <= step:
                assert store.remove(run_id) == 2
                del ends[run_id]
        if step % 30 == 25:
            store.push(q(step, user=2))
        samples[0] = EngineSample(slots=8, running=len(ends), waiting=0, tpot_s=0.1, updated_at=clock.now)
        for run in d.tick():
            ends[run.run_id] = step + 30
            if run.user_id == 2:
                waits.append(step - run.run_id)
            elif run.run_id in handed_back:
                redispatched.append(run.run_id)
        flood = sum(1 for run_id in ends if run_id >= 1000)
        if step < 25:
            peak_alone = max(peak_alone, flood)
        elif step >= 60:  # (the flood's runs sent while it was alone have ended)
            peak_shared = max(peak_shared, flood)
    assert waits == [0] * 10
    assert peak_alone == 8 + GATE.gates["free"].max_waiting  # every slot, and the gate's one waiting in the engine
    assert 0 < peak_shared <= 8 - LENT.headroom_slots  # the headroom kept (taken counts the other user's run too)
    assert len(handed_back) == 1 and redispatched == handed_back
