"""Celery's broker transport (``core.celery_redis``): kombu's Redis transport with one client object per channel.

kombu 5.7 builds a new ``redis.Redis`` (about 0.2 ms of CPU with redis-py 8) for every command it sends outside its
consumer's own connection: each acknowledgement, each event, each publish. These tests count the clients built
while messages go through the real broker, and check that the transport is the app's.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings
from kombu import Connection, Exchange, Producer, Queue

from bench.lib.processes import ROOT
from chatproject.celery import app
from core.celery_redis import Channel, Transport
from core.config import redis_connection_config_from_env
from core.redis_options import REDIS_TRANSPORT, SENTINEL_TRANSPORT, broker_transport


@pytest.fixture
def clients_built(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many ``redis.Redis`` objects were built since the fixture started."""
    built = [0]
    init = redis.Redis.__init__

    def counting_init(self: redis.Redis, *args: Any, **kwargs: Any) -> None:
        built[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting_init)
    return lambda: built[0]


def _connection() -> Connection:
    return Connection(app.conf.broker_url, transport=Transport, transport_options=app.conf.broker_transport_options)


def test_the_apps_broker_uses_the_transport_that_reuses_its_client() -> None:
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)
        assert isinstance(connection.default_channel, Channel)


def test_the_transport_follows_the_brokers_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_SENTINELS", raising=False)
    config = redis_connection_config_from_env()
    assert broker_transport(config, "redis://:pw@h:1/2") == REDIS_TRANSPORT
    assert broker_transport(config, "rediss://:pw@h:1/2") == REDIS_TRANSPORT
    assert broker_transport(config, "amqp://guest@h//") is None  # another broker keeps its own transport
    monkeypatch.setenv("REDIS_SENTINELS", "10.0.0.1:26379")
    assert broker_transport(redis_connection_config_from_env(), "redis://:pw@h:1/2") == SENTINEL_TRANSPORT


def test_publishes_and_acknowledgements_build_no_client_each(clients_built: Callable[[], int]) -> None:
    """40 messages published one by one (as Celery publishes its events) and acknowledged one by one (as a worker
    acknowledges each task): kombu's channel built a client for each of the 80 commands; this one builds one."""
    exchange = Exchange("broker-client-test", type="direct")
    queue = Queue("broker-client-test", exchange, routing_key="broker-client-test")
    received: list[Any] = []
    with _connection() as conn:
        channel = conn.channel()
        try:
            queue(channel).declare()
            queue(channel).purge()
            producer = Producer(channel, exchange=exchange, routing_key="broker-client-test")
            before = clients_built()
            for n in range(40):
                producer.publish({"n": n}, serializer="json")
            with conn.Consumer(queue, callbacks=[lambda body, message: received.append((body, message))]):
                while len(received) < 40:
                    conn.drain_events(timeout=5)
                for _, message in received:
                    message.ack()
            built = clients_built() - before
        finally:
            queue(channel).delete()
            channel.close()
    assert [body["n"] for body, _ in received] == list(range(40))
    assert built <= 2, f"{built} redis.Redis objects built for 40 publishes and 40 acknowledgements"


def test_a_replaced_pool_gets_a_client_of_its_own() -> None:
    """After a connection error kombu drops the channel's pools; the next command must not reuse the client bound
    to the old pool (its connections are the ones that failed)."""
    with _connection() as conn:
        channel = conn.channel()
        try:
            with channel.conn_or_acquire() as first:
                first.ping()
            with channel.conn_or_acquire() as again:
                assert again is first
            channel._disconnect_pools()
            with channel.conn_or_acquire() as after:
                assert after is not first
                assert after.connection_pool is channel.pool
                assert after.ping()
        finally:
            channel.close()


@pytest.mark.live
def test_the_task_overhead_bench_times_both_transports() -> None:
    """``bench/celery_task_overhead.py`` in short form: a real worker per side takes and acknowledges its tasks."""
    argv = [sys.executable, str(ROOT / "bench" / "celery_task_overhead.py"), "--tasks", "40", "--rounds", "1"]
    argv += ["--redis-url", settings.REDIS_URL, "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    lines = [line for line in done.stdout.splitlines() if "of the worker's CPU per task" in line]
    assert [line.split(":")[0].strip() for line in lines] == ["kombu", "project"], report
    assert redis.Redis.from_url(settings.CELERY_BROKER_URL).dbsize() == 0  # nothing left queued or unacked
