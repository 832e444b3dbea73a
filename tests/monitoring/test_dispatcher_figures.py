"""The dispatcher's figures in ``/metrics``: decisions, queue wait (enqueue to dispatch) and gate state by tier.

The dispatcher is a process of its own: its ``observer`` (``runs.dispatcher_figures``) writes them to Redis and
the web reads them at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from django.conf import settings
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from core.redis_client import get_redis
from generation.worker_contract import WorkerHeartbeat, write_heartbeat
from runs.dispatcher_figures import STATE_KEY, STATE_TTL_S, DispatcherFigures
from runs.dispatcher_wiring import build_dispatcher
from runs.models import Run
from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy, TierGate
from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import FairPolicy, QueuedRun, TierSpec
from tests.factories import ChatFactory, UserFactory
from tests.monitoring.test_metrics import scrape, value

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_redis")]

MODEL = settings.ENGINE.served_model_name
DEPLOYMENT = f"{MODEL}@v1"
"""The default deployment: the gates are reported per deployment, on its workers."""


def _heartbeat(*, running: int, waiting: int) -> None:
    beat = WorkerHeartbeat(
        worker="figures@test",
        model=MODEL,
        model_version="v",
        max_slots=8,
        running=running,
        waiting=waiting,
        kv_cache_usage=0.0,
        tpot_s=0.05,
        active_runs=running,
        updated_at=time.time(),
        deployment=DEPLOYMENT,
    )
    write_heartbeat(beat, ttl_s=30, client=get_redis())


def test_a_tick_records_decisions_queue_wait_and_gates_and_metrics_shows_them(
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    user = UserFactory.with_tier("pro")
    api = APIClient()
    api.force_authenticate(user)
    chat = ChatFactory.create(owner=user)
    with django_capture_on_commit_callbacks(execute=True):
        resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello"}, format="json")
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    _heartbeat(running=0, waiting=0)

    dispatcher = build_dispatcher()
    sent: list[QueuedRun] = []
    dispatcher.send = sent.append
    dispatcher.send_batch = None  # each run through the test's send, not Celery
    dispatcher.tick()
    dispatched_at = time.time()
    assert [r.run_id for r in sent] == [run.pk]

    samples = scrape()
    assert value(samples, "chat_dispatcher_decisions_total", tier="pro") == 1
    assert value(samples, "chat_dispatcher_decisions_total", tier="free") is None
    assert value(samples, "chat_scheduler_queue_wait_seconds_count", tier="pro") == 1
    waited = value(samples, "chat_scheduler_queue_wait_seconds_sum", tier="pro")
    assert waited is not None and 0 <= waited <= dispatched_at - run.created_at.timestamp()
    assert value(samples, "chat_scheduler_queue_wait_seconds_bucket", tier="pro", le="+Inf") == 1
    for tier in ("pro", "plus", "free"):
        assert value(samples, "chat_dispatcher_gate_open", tier=tier, deployment=DEPLOYMENT) == 1
    assert value(samples, "chat_dispatcher_gate_open", tier="batch", deployment=DEPLOYMENT) in (0, 1)
    # One backlogged user at most in every tier: no service difference.
    assert value(samples, "chat_scheduler_service_spread_tokens", tier="pro") == 0
    age = value(samples, "chat_dispatcher_figures_age_seconds")
    assert age is not None and 0 <= age < 5
    assert value(samples, "chat_metrics_source_up", source="dispatcher") == 1
    assert 0 < get_redis().ttl(STATE_KEY) <= STATE_TTL_S  # a dispatcher that stops leaves no gate behind

    # The engines fill up: the gates close. Within a second of the last write nothing is written...
    _heartbeat(running=8, waiting=6)
    dispatcher.tick()
    assert value(scrape(), "chat_dispatcher_gate_open", tier="pro", deployment=DEPLOYMENT) == 1
    # ...then the next tick records it.
    assert isinstance(dispatcher.observer, DispatcherFigures)
    dispatcher.observer.write_interval_s = 0.0
    dispatcher.tick()
    closed = scrape()
    for tier in ("pro", "plus", "free", "batch"):
        assert value(closed, "chat_dispatcher_gate_open", tier=tier, deployment=DEPLOYMENT) == 0
    assert value(closed, "chat_dispatcher_decisions_total", tier="pro") == 1


class RecordingObserver:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.decisions: list[tuple[int, float]] = []
        self.gates: list[dict[str, bool]] = []
        self.spreads: list[dict[str, float]] = []
        self.backlogs: list[dict[str, tuple[int, int]]] = []

    def decided(self, run: QueuedRun, *, waited_s: float) -> None:
        if self.fail:
            raise RuntimeError("observer down")
        self.decisions.append((run.run_id, waited_s))

    def ticked(
        self,
        gates: Mapping[str, bool],
        spreads: Mapping[str, float],
        deployment_gates: Mapping[tuple[str, str], bool] | None = None,
    ) -> None:
        if self.fail:
            raise RuntimeError("observer down")
        self.gates.append(dict(gates))
        self.spreads.append(dict(spreads))

    def queued(self, backlog: Mapping[str, tuple[int, int]]) -> None:
        if self.fail:
            raise RuntimeError("observer down")
        self.backlogs.append(dict(backlog))


def _memory_dispatcher(observer: Any, now: list[float]) -> tuple[Dispatcher, MemoryQueueStore, list[QueuedRun]]:
    store = MemoryQueueStore(tiers=["pro", "batch"], clock=lambda: now[0])
    sent: list[QueuedRun] = []
    dispatcher = Dispatcher(
        store=store,
        policy=FairPolicy([TierSpec("pro", 0), TierSpec("batch", 3)]),
        gate=GatePolicy(
            gates={
                "pro": TierGate(max_waiting=1, max_tpot_s=1.0),
                "batch": TierGate(max_waiting=1, max_tpot_s=1.0, only_when_idle=True),
            },
            fallback_max_in_flight=4,
            idle_running_fraction=0.5,
        ),
        settings=DispatcherSettings(
            stale_after_s=5.0, in_flight_ttl_s=3600, tick_s=0.001, positions_interval_s=60.0, leader_ttl_ms=5000
        ),
        stats=lambda: [EngineSample(slots=2, running=0, waiting=0, tpot_s=None, updated_at=now[0])],
        send=sent.append,
        clock=lambda: now[0],
        observer=observer,
    )
    return dispatcher, store, sent


def test_the_observer_sees_each_decision_with_its_wait_and_the_gates_after_the_tick() -> None:
    now = [1000.0]
    observer = RecordingObserver()
    dispatcher, store, sent = _memory_dispatcher(observer, now)
    store.push(QueuedRun(run_id=1, user_id=1, tier="pro", cost=10, enqueued_at=990.0))
    store.push(QueuedRun(run_id=2, user_id=2, tier="pro", cost=10, enqueued_at=997.5))
    dispatcher.tick()
    assert [r.run_id for r in sent] == [1, 2]
    assert observer.decisions == [(1, 10.0), (2, 2.5)]
    # Both slots taken by the runs just sent: pro may still queue one in the engine, batch waits for idle.
    assert observer.gates == [{"pro": True, "batch": False}]
    assert observer.spreads == [{"pro": 0.0, "batch": 0.0}]  # both users' queues are empty again


def test_a_failing_observer_never_stops_dispatching() -> None:
    now = [1000.0]
    dispatcher, store, sent = _memory_dispatcher(RecordingObserver(fail=True), now)
    store.push(QueuedRun(run_id=1, user_id=1, tier="pro", cost=10, enqueued_at=999.0))
    assert [r.run_id for r in dispatcher.tick()] == [1]
    assert [r.run_id for r in sent] == [1]


def test_the_backlog_per_deployment_reaches_metrics_as_queued_runs_and_tokens() -> None:
    """The autoscaling signal (KEDA in deploy/kubernetes): what is queued for each deployment, in tokens."""
    now = [1000.0]
    observer = RecordingObserver()
    dispatcher, store, _ = _memory_dispatcher(observer, now)
    store.push(QueuedRun(run_id=1, user_id=1, tier="batch", cost=100, enqueued_at=999.0, deployment="big@2"))
    store.push(QueuedRun(run_id=2, user_id=1, tier="batch", cost=50, enqueued_at=999.0, deployment="big@2"))
    store.push(QueuedRun(run_id=3, user_id=2, tier="batch", cost=7, enqueued_at=999.0, deployment="small@1"))
    dispatcher.refresh_positions()
    assert observer.backlogs == [{"big@2": (2, 150), "small@1": (1, 7)}]

    figures = DispatcherFigures(deployment=DEPLOYMENT, write_interval_s=0.0)
    figures.queued(observer.backlogs[-1])
    figures.ticked({"pro": True}, {})
    metrics = scrape()
    assert value(metrics, "chat_queued_tokens", deployment="big@2") == 150
    assert value(metrics, "chat_queued_runs", deployment="big@2") == 2
    assert value(metrics, "chat_queued_tokens", deployment="small@1") == 7
