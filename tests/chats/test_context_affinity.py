"""Chat affinity: a chat's next run goes to the worker holding its prompt prefix, while that worker has room."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery, current_app
from django.conf import settings
from pytest_django.fixtures import Settings

from generation.worker_contract import GENERATE_TASK, WorkerHeartbeat, deployment_queue, write_heartbeat
from inference_workers.affinity import consume_own_queue
from inference_workers.deployment import worker_deployment
from runs.dispatcher_wiring import build_dispatcher
from runs.models import Run
from runs.queueing import get_scheduler_store
from runs.routing import Dispatch, send_to_worker, send_to_workers
from scheduling.affinity import WorkerLoad, choose_route, worker_queue
from tests.factories import ChatFactory, RunFactory

NOW = 1_000.0


def _load(name: str, *, running: int = 0, waiting: int = 0, slots: int = 4, age: float = 0.5) -> WorkerLoad:
    return WorkerLoad(name=name, slots=slots, running=running, waiting=waiting, updated_at=NOW - age)


def _route(previous: str, workers: list[WorkerLoad], **kwargs: Any) -> tuple[str, str | None, str]:
    route = choose_route(
        previous_worker=previous, tier_queue="free", workers=workers, now=NOW, stale_after_s=10, **kwargs
    )
    return route.queue, route.worker, route.reason


def test_the_previous_worker_is_preferred_while_it_has_room() -> None:
    workers = [_load("w1", running=3), _load("w2")]
    assert _route("w1", workers) == ("worker.w1", "w1", "affinity")


def test_a_full_previous_worker_falls_back_to_the_shared_queue() -> None:
    assert _route("w1", [_load("w1", running=4), _load("w2")]) == ("free", None, "previous_worker_full")
    assert _route("w1", [_load("w1", running=2, waiting=2)]) == ("free", None, "previous_worker_full")
    # Runs already routed there since its heartbeat count as load.
    assert _route("w1", [_load("w1", running=2)], pending={"w1": 2}) == ("free", None, "previous_worker_full")
    # A small tolerated queue keeps the affinity a little longer.
    assert _route("w1", [_load("w1", running=4)], max_waiting=1) == ("worker.w1", "w1", "affinity")


def test_a_silent_or_unknown_previous_worker_is_not_waited_for() -> None:
    assert _route("w1", [_load("w1", age=30)]) == ("free", None, "previous_worker_gone")
    assert _route("w9", [_load("w1")]) == ("free", None, "previous_worker_gone")
    assert _route("", [_load("w1")]) == ("free", None, "no_previous_worker")


def _beat(client: redis.Redis, worker: str, *, running: int, slots: int = 4, deployment: str = "") -> None:
    beat = WorkerHeartbeat(
        worker=worker,
        model="m",
        model_version="v",
        max_slots=slots,
        running=running,
        waiting=0,
        kv_cache_usage=0.0,
        tpot_s=None,
        active_runs=running,
        updated_at=time.time(),
        deployment=deployment,
    )
    write_heartbeat(beat, ttl_s=10, client=client)


def _sent_to(queue: str) -> list[list[int]]:
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    items = broker.lrange(queue, 0, -1)
    broker.delete(queue)
    return [json.loads(json.loads(item)["headers"]["argsrepr"]) for item in items if b"inference_workers" in item]


@pytest.mark.django_db
def test_send_to_worker_pins_a_run_to_its_chats_previous_worker(clean_redis: redis.Redis, settings: Settings) -> None:
    chat = ChatFactory.create(last_worker="gpu-a@host")
    run = RunFactory.create(chat=chat)
    fresh = RunFactory.create()  # a chat nobody served yet
    for queue in ("free", worker_queue("gpu-a@host")):
        _sent_to(queue)

    _beat(clean_redis, "gpu-a@host", running=1)
    send_to_worker(run_id=run.pk, queue="free")
    send_to_worker(run_id=fresh.pk, queue="free")
    assert _sent_to(worker_queue("gpu-a@host")) == [[run.pk]]
    assert _sent_to("free") == [[fresh.pk]]

    _beat(clean_redis, "gpu-a@host", running=4)  # full: any worker will do
    send_to_worker(run_id=run.pk, queue="free")
    assert _sent_to("free") == [[run.pk]]

    _beat(clean_redis, "gpu-a@host", running=0)
    settings.CONTEXT = dataclasses.replace(settings.CONTEXT, chat_affinity=False)
    send_to_worker(run_id=run.pk, queue="free")
    assert _sent_to("free") == [[run.pk]] and _sent_to(worker_queue("gpu-a@host")) == []
    assert GENERATE_TASK.startswith("inference_workers")


@pytest.mark.django_db
def test_a_batch_is_routed_with_one_query_and_a_message_that_fails_loses_only_its_own_run(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    pinned = RunFactory.create(chat=ChatFactory.create(last_worker="gpu-a@host"))
    others = [RunFactory.create() for _ in range(3)]
    for queue in ("free", worker_queue("gpu-a@host")):
        _sent_to(queue)
    _beat(clean_redis, "gpu-a@host", running=1)
    dispatches = [Dispatch(run.pk, "free") for run in (pinned, *others)]
    with django_assert_num_queries(1):  # the routing of the four: one query, not one a run
        assert send_to_workers(dispatches) == []
    assert _sent_to(worker_queue("gpu-a@host")) == [[pinned.pk]]
    assert sorted(_sent_to("free")) == [[run.pk] for run in others]

    app = current_app._get_current_object()
    real = app.send_task

    def refuses_one(name: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs["args"] == [others[1].pk]:
            raise ValueError("cannot encode it")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(app, "send_task", refuses_one)
    failed = send_to_workers([Dispatch(run.pk, "free") for run in others])
    assert [(d.run_id, str(exc)) for d, exc in failed] == [(others[1].pk, "cannot encode it")]
    assert sorted(_sent_to("free")) == [[others[0].pk], [others[2].pk]]
    with pytest.raises(ValueError, match="unknown worker queue"):
        send_to_workers([Dispatch(others[0].pk, "no-such-tier")])
    assert _sent_to("free") == []  # nothing of a batch with a wrong queue is sent


@pytest.mark.django_db
def test_a_batch_goes_to_the_broker_in_one_round_trip_and_fails_whole(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick's runs and their ``task-sent`` events are one pipeline to the broker (kombu's ``Producer.batch``),
    not two round trips a run; when that send fails, every run of it is reported failed (the dispatcher queues them
    again), and none is half-logged as dispatched."""
    import kombu.transport.redis
    import redis.connection

    runs = [RunFactory.create() for _ in range(9)]
    _sent_to("free")
    broker_db = redis.Redis.from_url(settings.CELERY_BROKER_URL).connection_pool.connection_kwargs.get("db", 0)
    sends = Counter[str]()
    real_send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: redis.connection.AbstractConnection, command: Any, check_health: bool = True) -> None:
        if getattr(self, "db", None) == broker_db:  # (the app's own Redis is another database)
            sends["broker"] += 1
        real_send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)

    def broker_round_trips(batch: list[Any]) -> int:
        before = sends["broker"]
        assert send_to_workers([Dispatch(run.pk, "free") for run in batch]) == []
        return sends["broker"] - before

    broker_round_trips(runs[:1])  # (the producer's connection and the queue's declaration, once)
    one, eight = broker_round_trips(runs[:1]), broker_round_trips(runs[1:])
    assert one == eight == 1
    assert sorted(_sent_to("free")) == sorted([run.pk] for run in [runs[0], *runs])  # (the first went twice)

    def broker_down(self: Any) -> None:
        raise kombu.transport.redis.BatchPublishError("Redis publish batch failed; delivery is uncertain")

    monkeypatch.setattr(kombu.transport.redis.PublishBatch, "flush", broker_down)
    failed = send_to_workers([Dispatch(run.pk, "free") for run in runs[:3]])
    assert sorted(d.run_id for d, _exc in failed) == sorted(run.pk for run in runs[:3])
    assert all("delivery is uncertain" in str(exc) for _d, exc in failed)


@pytest.mark.django_db
def test_a_queue_is_declared_by_the_first_send_alone_and_flower_reads_the_same_arguments(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process declares a queue with its first send to it, not again with every send (Celery would: kombu's
    cache answers, after a bound copy and a retry wrapper, a third of a send's CPU); the message's ``argsrepr`` and
    ``kwargsrepr``, given to Celery, are what its ``saferepr`` writes, so Flower shows the same."""
    import kombu.messaging
    from celery.utils.saferepr import saferepr

    from generation import worker_contract

    runs = [RunFactory.create() for _ in range(3)]
    _sent_to("free")
    monkeypatch.setattr(worker_contract, "_declared_queues", set())  # a process that has not sent yet
    declared: list[str] = []
    real = kombu.messaging.Producer.maybe_declare

    def recorded(self: kombu.messaging.Producer, entity: Any, retry: bool = False, **policy: Any) -> Any:
        declared.append(entity.name)
        return real(self, entity, retry, **policy)

    monkeypatch.setattr(kombu.messaging.Producer, "maybe_declare", recorded)
    messages = [worker_contract.GenerateMessage(run.pk, "free", engine_priority=7) for run in runs[:2]]
    assert worker_contract.send_generates(messages) == [None, None]
    assert declared.count("free") == 1  # the first message's; the second's is known declared
    declared.clear()
    assert worker_contract.send_generates([worker_contract.GenerateMessage(runs[2].pk, "free")]) == [None]
    assert "free" not in declared

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    headers = [json.loads(item)["headers"] for item in reversed(broker.lrange("free", 0, -1))]
    broker.delete("free")
    assert [(h["argsrepr"], h["kwargsrepr"]) for h in headers] == [
        (saferepr([runs[0].pk]), saferepr({"engine_priority": 7})),
        (saferepr([runs[1].pk]), saferepr({"engine_priority": 7})),
        (saferepr([runs[2].pk]), saferepr({})),
    ]


@pytest.mark.django_db
def test_a_gpu_worker_consumes_its_own_queue_and_other_workers_do_not() -> None:
    worker_deployment.cache_clear()
    gpu = Celery("gpu", set_as_current=False)
    gpu.amqp.queues.select(settings.CELERY_TASK_QUEUES_ORDER)
    consume_own_queue(sender="gpu-a@host", instance=SimpleNamespace(app=gpu))
    worker_deployment.cache_clear()
    assert worker_queue("gpu-a@host") in gpu.amqp.queues.consume_from
    assert set(settings.CELERY_TASK_QUEUES_ORDER) <= set(gpu.amqp.queues.consume_from)

    other = Celery("other", set_as_current=False)
    other.amqp.queues.select(["maintenance"])
    consume_own_queue(sender="cpu@host", instance=SimpleNamespace(app=other))
    assert list(other.amqp.queues.consume_from) == ["maintenance"]


@pytest.mark.django_db
def test_a_batch_whose_heartbeats_cannot_be_read_goes_to_the_tier_queue(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Routing never blocks a run: when Redis does not answer the previous workers' heartbeats, every run of the
    batch goes to its tier queue."""
    pinned = RunFactory.create(chat=ChatFactory.create(last_worker="gpu-a@host"))
    _beat(clean_redis, "gpu-a@host", running=0)
    for queue in ("free", worker_queue("gpu-a@host")):
        _sent_to(queue)

    def redis_down(workers: object) -> dict[str, WorkerHeartbeat]:
        raise redis.ConnectionError("Redis is restarting")

    monkeypatch.setattr("runs.routing.worker_heartbeats_of", redis_down)
    with caplog.at_level("INFO", logger="runs.events"):
        assert send_to_workers([Dispatch(pinned.pk, "free")]) == []
    assert _sent_to("free") == [[pinned.pk]] and _sent_to(worker_queue("gpu-a@host")) == []
    assert f"run {pinned.pk} sent to queue free (affinity_lookup_failed)" in caplog.messages


@pytest.mark.django_db
def test_a_posted_prompt_is_routed_to_its_chats_previous_worker_with_no_database_read_at_dispatch(
    clean_redis: redis.Redis,
    api: Any,
    user: Any,
    django_assert_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The prompt's statement returns the chat's ``last_worker`` and the queue keeps it with the run, so the
    dispatcher's send routes the run there (and logs it) without reading Postgres; a chat nobody served yet goes to
    its tier queue."""
    pinned_chat = ChatFactory.create(owner=user, last_worker="gpu-a@host")
    fresh_chat = ChatFactory.create(owner=user)
    with django_capture_on_commit_callbacks(execute=True):  # queued when the prompt's statement commits
        for chat in (pinned_chat, fresh_chat):
            resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "again", "max_tokens": 8}, format="json")
            assert resp.status_code == 202, resp.content
    tier = user.tier.name
    heads = get_scheduler_store().heads()[tier]
    assert [run.last_worker for run in heads.values()] == ["gpu-a@host"]  # one user: its first run is the head
    pinned, fresh = Run.objects.filter(user=user).order_by("pk")
    deployment = heads[user.pk].deployment
    assert deployment, "the run's deployment is queued with it"
    _beat(clean_redis, "gpu-a@host", running=1, deployment=deployment)
    for queue in (worker_queue("gpu-a@host"), deployment_queue(tier, deployment)):
        _sent_to(queue)

    dispatcher = build_dispatcher()
    dispatcher.housekeeping = None  # (the leader's periodic repairs read Postgres every 2 s: not the decisions)
    with caplog.at_level("INFO", logger="runs.events"), django_assert_num_queries(0):
        sent = [run.run_id for _ in range(2) for run in dispatcher.tick()]
    assert sorted(sent) == [pinned.pk, fresh.pk]
    assert _sent_to(worker_queue("gpu-a@host")) == [[pinned.pk]]
    assert _sent_to(deployment_queue(tier, deployment)) == [[fresh.pk]]
    dispatched = [r for r in caplog.records if getattr(r, "event", "") == "dispatched"]
    assert {(r.run_id, r.user_id, r.tier, r.worker) for r in dispatched} == {  # type: ignore[attr-defined]
        (pinned.pk, user.pk, tier, "gpu-a@host"),
        (fresh.pk, user.pk, tier, ""),
    }
