"""Each deployment is gated on its own workers: a full version never holds up another version's runs."""

from __future__ import annotations

from dataclasses import replace

from scheduling.gate import EngineSample
from scheduling.policy import QueuedRun
from scheduling.store import QueueStore
from tests.scheduling.test_dispatch import FakeClock, make_dispatcher, q

V1, V2 = "m@v1", "m@v2"


def on(deployment: str, run: QueuedRun) -> QueuedRun:
    return replace(run, deployment=deployment)


def test_runs_in_flight_are_counted_per_deployment(store: QueueStore) -> None:
    for run in (on(V1, q(1, 10)), on(V1, q(2, 11)), on(V2, q(3, 12))):
        store.push(run)
    assert store.claim(on(V1, q(1, 10)), now=100.0)
    assert store.claim(on(V1, q(2, 11)), now=105.0)
    assert store.claim(on(V2, q(3, 12)), now=106.0)
    flight = store.in_flight(now=110.0, ttl_s=60, since=105.0)
    assert flight.per_deployment == {V1: 2, V2: 1}
    assert flight.recent_per_deployment == {V1: 1, V2: 1}
    assert store.heads() == {}
    store.remove(2)
    assert store.in_flight(now=110.0, ttl_s=60).per_deployment == {V1: 1, V2: 1}


def test_the_queued_run_keeps_its_deployment(store: QueueStore) -> None:
    store.push(on(V2, q(7, 10)))
    assert store.heads()["free"][10].deployment == V2


def test_a_full_deployment_does_not_hold_up_another(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [
        EngineSample(slots=2, running=2, waiting=3, tpot_s=0.1, updated_at=clock.now, deployment=V1),  # full
        EngineSample(slots=8, running=0, waiting=0, tpot_s=None, updated_at=clock.now, deployment=V2),  # idle
    ]
    for run in (on(V1, q(1, 10)), on(V1, q(2, 11)), on(V2, q(3, 12)), on(V2, q(4, 13))):
        store.push(run)
    d = make_dispatcher(store, samples, sent, clock)
    d.tick()
    assert sorted(r.run_id for r in sent) == [3, 4]  # v2's runs went; v1's wait for its own workers
    assert {r.deployment for r in sent} == {V2}
    assert d.deployment_loads[V2].in_flight == 2 and d.deployment_loads[V1].in_flight == 0

    samples[0] = replace(samples[0], running=0, waiting=0)  # v1's worker freed up
    d.tick()
    assert sorted(r.run_id for r in sent) == [1, 2, 3, 4]


def test_a_deployment_with_no_worker_uses_the_fallback_cap_on_its_own_runs(store: QueueStore) -> None:
    clock, sent = FakeClock(), list[QueuedRun]()
    samples = [EngineSample(slots=8, running=0, waiting=0, tpot_s=None, updated_at=clock.now, deployment=V1)]
    for i in range(1, 6):
        store.push(on(V2, q(i, 10 + i)))
    d = make_dispatcher(store, samples, sent, clock)
    d.tick()
    assert len(sent) == 3  # GATE.fallback_max_in_flight: v1's idle slots are not v2's


class Gates:
    def __init__(self) -> None:
        self.by_deployment: list[dict[tuple[str, str], bool]] = []

    def decided(self, run: QueuedRun, *, waited_s: float) -> None:
        pass

    def ticked(self, gates: object, spreads: object, deployment_gates: dict[tuple[str, str], bool]) -> None:
        self.by_deployment.append(dict(deployment_gates))

    def queued(self, backlog: object) -> None:
        pass


def test_the_gates_are_reported_per_deployment(store: QueueStore) -> None:
    clock, sent, observer = FakeClock(), list[QueuedRun](), Gates()
    samples = [
        EngineSample(slots=2, running=2, waiting=3, tpot_s=0.1, updated_at=clock.now, deployment=V1),
        EngineSample(slots=8, running=0, waiting=0, tpot_s=None, updated_at=clock.now, deployment=V2),
    ]
    make_dispatcher(store, samples, sent, clock, observer=observer).tick()
    assert observer.by_deployment[-1][("free", V1)] is False  # 3 waiting: above free's max_waiting of 1
    assert observer.by_deployment[-1][("free", V2)] is True
