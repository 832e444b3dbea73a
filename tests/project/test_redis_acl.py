"""Per-role Redis ACL users (``manage.py redis_acl``): a ``redis-server`` of the test's own loads the file the
command writes; each role's real operations, through our code with ``REDIS_URL`` naming that role's user, work,
and what lies outside a role's rights is refused with ``NOPERM``."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.core.management import call_command
from kombu.transport.redis import Channel as KombuRedisChannel
from pytest_django.fixtures import Settings

from core.redis_client import get_redis
from generation.worker_contract import (
    WorkerHeartbeat,
    cancel_channel,
    cancel_key,
    ready_worker_counts,
    request_yields,
    run_lease_key,
    signal_cancel,
    worker_heartbeats,
    write_heartbeat,
    yield_channel,
)
from monitoring.redis_acl import acl_lines, role_passwords
from runs.streaming.contract import RunStreamWriter, StreamEvent, read_after
from runs.streaming.relay import StreamRelay
from scheduling.policy import QueuedRun
from scheduling.redis_store import RedisQueueStore, wake_dispatcher
from tests.redis_servers import MASTER, Server, claim_port, sentinel_setup, start_server, wait_until
from tests.runs.test_stream_units import run_on_own_loop

PASSWORDS = {name: f"{name}-secret" for name in ("web", "worker", "dispatcher", "celery", "replica", "sentinel")}
DEPLOYMENT = "SmolLM2-135M-Instruct@v1"


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[Server]:
    acl_file = tmp_path / "users.acl"
    call_command("redis_acl", "--out", str(acl_file), *[f"--password={k}={v}" for k, v in PASSWORDS.items()])
    assert acl_file.stat().st_mode & 0o777 == 0o600
    server = start_server(
        tmp_path / "acl",
        claim_port(set()),
        config=f"aclfile {acl_file}\n",
        client_options={"username": "worker", "password": PASSWORDS["worker"]},
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def as_role(settings: Settings, acl_redis: Server) -> Iterator[object]:
    def switch(role: str) -> redis.Redis:
        settings.REDIS_URL = f"redis://{role}:{PASSWORDS[role]}@127.0.0.1:{acl_redis.port}/1"
        get_redis.cache_clear()
        return get_redis()

    try:
        yield switch
    finally:
        get_redis.cache_clear()


def _beat(worker: str) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker=worker,
        model="m",
        model_version="v1",
        max_slots=4,
        running=0,
        waiting=0,
        kv_cache_usage=0.0,
        tpot_s=None,
        active_runs=0,
        updated_at=time.time(),
        deployment=DEPLOYMENT,
    )


def test_nobody_can_log_in_as_default_and_every_role_has_a_user() -> None:
    lines = acl_lines(role_passwords({}))
    default = lines[0].split()
    assert default[:3] == ["user", "default", "on"]
    secrets_given = [part for part in default if part.startswith((">", "#", "nopass"))]
    assert len(secrets_given) == 1 and re.fullmatch(r"#[0-9a-f]{64}", secrets_given[0])  # a hash, no password
    assert acl_lines(role_passwords({}))[0] != lines[0]  # a new thrown-away secret each time
    assert "-@dangerous" in default
    assert [line.split()[1] for line in lines[1:]] == ["web", "worker", "dispatcher", "celery", "replica", "sentinel"]
    assert all("~*" not in line.split() and "allkeys" not in line for line in lines[1:])


def test_writes_in_transactions_and_scripts_survive_a_restart_from_the_append_only_file(tmp_path: Path) -> None:
    """A restart replays the append-only file as ``default``, and ``EXEC`` checks its rights again (Redis
    7.0.15): with ``user default off`` the writes logged inside ``MULTI``/``EXEC`` (a Lua script's too) were
    refused and lost, silently."""
    acl_file = tmp_path / "users.acl"
    call_command("redis_acl", "--out", str(acl_file), *[f"--password={k}={v}" for k, v in PASSWORDS.items()])
    folder = tmp_path / "aof"
    port = claim_port(set())
    login = {"username": "worker", "password": PASSWORDS["worker"]}
    config = f"aclfile {acl_file}\nappendonly yes\nappendfsync always\n"
    server = start_server(folder, port, config=config, client_options=login)
    try:
        client = server.client()
        pipe = client.pipeline(transaction=True)
        pipe.hset("run:1:lease", "a", "1")
        pipe.rpush("run:1:events", "x")
        pipe.execute()
        script = "redis.call('set', KEYS[1], 'v'); return redis.call('incr', KEYS[2])"
        client.eval(script, 2, "run:2:lease", "metrics:n")
        client.set("run:3:lease", "plain")
        client.close()
    finally:
        server.stop(signal.SIGTERM)
    server = start_server(folder, port, config=config, client_options=login)
    try:
        client = server.client()
        assert client.get("run:3:lease") == "plain"  # (never inside a transaction: always kept)
        assert client.hgetall("run:1:lease") == {"a": "1"}
        assert client.lrange("run:1:events", 0, -1) == ["x"]
        assert client.get("run:2:lease") == "v" and client.get("metrics:n") == "1"
    finally:
        server.stop()


def test_each_role_does_its_work_and_nothing_else(as_role: object, acl_redis: Server) -> None:
    switch = as_role
    assert callable(switch)

    # The worker: heartbeat and readiness, a run's lease, its stream, the cancel channel, waking the dispatcher.
    worker = switch("worker")
    pipe = worker.pipeline(transaction=False)
    write_heartbeat(_beat("w1"), ttl_s=30, client=pipe)
    pipe.set(run_lease_key(7), "w1", ex=30)
    wake_dispatcher(pipe)
    pipe.execute()
    writer = RunStreamWriter(7)
    writer.append(StreamEvent.DELTA, {"text": "hi"})
    pubsub = worker.pubsub()
    pubsub.subscribe(cancel_channel(), yield_channel())  # (what its cancel listener does)
    confirmed = [pubsub.get_message(timeout=2) for _ in range(2)]
    assert [m["type"] if m else None for m in confirmed] == ["subscribe", "subscribe"]
    with pytest.raises(redis.exceptions.NoPermissionError):
        worker.set("usage:rejections:1", "x")  # the web's refusals are not the worker's
    with pytest.raises(redis.exceptions.NoPermissionError):
        worker.lpush(f"free.{DEPLOYMENT}", "x")  # Celery's queues are the celery user's
    with pytest.raises(redis.exceptions.NoPermissionError):
        worker.flushall()

    # The web: admission into the scheduler's queues, reading streams (the relay and its CLIENT UNBLOCK),
    # cancelling, reading the workers' state; never writing it, never administering Redis.
    web = switch("web")
    store = RedisQueueStore(web, tiers=["free"])
    assert store.push(QueuedRun(run_id=7, user_id=3, tier="free", cost=10, deployment=DEPLOYMENT))
    assert [e.data["text"] for e in read_after(7, 0)] == ["hi"]
    signal_cancel(run_id=7)
    assert web.get(cancel_key(7)) == "1"
    assert ready_worker_counts([DEPLOYMENT]) == {DEPLOYMENT: 1}
    assert [b.worker for b in worker_heartbeats()] == ["w1"]

    async def relay_reads() -> None:
        relay = StreamRelay(settings.REDIS_URL)
        try:
            sub, _ = await relay.subscribe(7, 0)
            assert [e.seq for e in await sub.next_batch(10)] == [1]
            other, _ = await relay.subscribe(8, 0)  # a second key wakes the blocked read: CLIENT UNBLOCK
            await asyncio.sleep(0.05)
            RunStreamWriter(8, client=switch_client("worker")).append(StreamEvent.DELTA, {"text": "x"})
            assert [e.seq for e in await other.next_batch(10)] == [1]
        finally:
            await relay.aclose()

    def switch_client(role: str) -> redis.Redis:
        return redis.Redis(port=acl_redis.port, db=1, username=role, password=PASSWORDS[role], decode_responses=True)

    run_on_own_loop(relay_reads())
    message = pubsub.get_message(timeout=5)
    while message is not None and message["type"] != "message":
        message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == "7"  # the worker heard the web's cancel
    pubsub.close()
    assert web.client_unblock(10**9) is False  # the relay's CLIENT UNBLOCK is the web's (no such client here)
    with pytest.raises(redis.exceptions.NoPermissionError):
        write_heartbeat(_beat("fake"), ttl_s=30, client=web)  # read-only to the web
    for command in (
        ("FLUSHALL",),
        ("CONFIG", "GET", "maxmemory"),
        ("KEYS", "*"),
        ("ACL", "LIST"),
        ("REPLICAOF", "NO", "ONE"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            web.execute_command(*command)

    # The dispatcher: leadership, claiming the queued run, reading the workers; not the web's refusals.
    dispatcher = switch("dispatcher")
    store = RedisQueueStore(dispatcher, tiers=["free"])
    token = store.new_lock_token()
    assert store.acquire_or_renew_leadership(token, ttl_ms=5000)
    assert store.wait_for_work(0.01)
    start = store.begin_tick(token, ttl_ms=5000, now=time.time(), in_flight_ttl_s=600.0)  # a tick's one read
    assert start is not None and start.heads == store.heads()
    heads = store.heads()
    assert [run.run_id for run in heads["free"].values()] == [7]  # (by user id)
    assert store.claim(heads["free"][3])
    assert [b.worker for b in worker_heartbeats()] == ["w1"]
    store.release_leadership(token)
    listener = worker.pubsub()  # (the worker's client, as its cancel listener holds it)
    listener.subscribe(yield_channel())
    assert (listener.get_message(timeout=2) or {}).get("type") == "subscribe"
    request_yields([7], client=dispatcher)  # a preemption reaches the workers' listeners
    yielded = listener.get_message(timeout=2)
    listener.close()
    assert yielded is not None and (yielded["channel"], yielded["data"]) == (yield_channel(), "7")
    with pytest.raises(redis.exceptions.NoPermissionError):
        write_heartbeat(_beat("w1"), ttl_s=30, client=dispatcher)
    with pytest.raises(redis.exceptions.NoPermissionError):
        dispatcher.execute_command("CONFIG", "SET", "maxmemory", "1")
    with pytest.raises(redis.exceptions.NoPermissionError):
        dispatcher.set("usage:rejections:1", "x")

    # Celery's user: the broker's queues only.
    url = f"redis://celery:{PASSWORDS['celery']}@127.0.0.1:{acl_redis.port}/2"
    broker = Celery("acl-test")
    broker.conf.update(broker_read_url=url, broker_write_url=url)
    broker.send_task("acl.probe", queue=f"free.{DEPLOYMENT}")
    celery_client = redis.Redis.from_url(url, decode_responses=True)
    assert celery_client.llen(f"free.{DEPLOYMENT}") == 1
    with broker.connection_for_read() as conn:  # a consumer: bindings, BRPOP, the unacked bookkeeping
        queue = conn.SimpleQueue(f"free.{DEPLOYMENT}")
        message = queue.get(timeout=10)
        assert message.headers["task"] == "acl.probe"
        message.ack()
        queue.close()
    assert celery_client.llen(f"free.{DEPLOYMENT}") == 0
    # A worker's remote-control queue is a list per priority, named with kombu's separator (the hosts test found
    # a real worker refused on "w1@host.celery.pidbox\x06\x163" when the pattern was "*.pidbox").
    assert celery_client.llen(f"w1@host.celery.pidbox{KombuRedisChannel.sep}3") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        celery_client.get(run_lease_key(7))


def test_a_wrong_password_is_refused(acl_redis: Server) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_redis.port, username="web", password="nope").ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_redis.port).ping()  # nobody can log in as default


def test_the_acl_file_serves_replication_and_a_sentinel_failover(tmp_path: Path, settings: Settings) -> None:
    """Primary and replica load the file: the replica replicates as ``replica``, the Sentinels log in as
    ``sentinel`` and promote the replica after the primary is killed; the worker's stream goes on there."""
    acl_file = tmp_path / "users.acl"
    call_command("redis_acl", "--out", str(acl_file), *[f"--password={k}={v}" for k, v in PASSWORDS.items()])
    servers = sentinel_setup(tmp_path / "ha", acl=(acl_file, PASSWORDS))
    ha = next(servers)
    try:
        settings.REDIS_CONNECTION = replace(
            settings.REDIS_CONNECTION,
            sentinels=tuple(("127.0.0.1", s.port) for s in ha.sentinels),
            sentinel_master=MASTER,
        )
        settings.REDIS_URL = f"redis://worker:{PASSWORDS['worker']}@127.0.0.1:1/1"
        get_redis.cache_clear()

        def as_worker(server: Server) -> redis.Redis:
            return server.client(username="worker", password=PASSWORDS["worker"], db=1)

        writer = RunStreamWriter(5)
        writer.append(StreamEvent.DELTA, {"text": "a"})
        assert as_worker(ha.primary).execute_command("WAIT", 1, 5000) == 1  # replicated as the replica user
        ha.primary.stop(signal.SIGKILL)
        wait_until(lambda: ha.primary_port() == ha.replica.port, what="the Sentinels to promote the replica")
        wait_until(lambda: ha.replica.client().info("replication")["role"] == "master", what="the promotion")
        writer.append(StreamEvent.DELTA, {"text": "b"})
        assert [e.seq for e in read_after(5, 0, client=as_worker(ha.replica))] == [1, 2]
        with pytest.raises(redis.exceptions.NoPermissionError):
            ha.replica.client().get("run:5:events")  # the Sentinels' user reads no data
    finally:
        get_redis.cache_clear()
        servers.close()
