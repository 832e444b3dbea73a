"""Redis under Sentinel: a real primary, its replica and three Sentinels (``tests/redis_servers.py``); the primary
is killed (SIGKILL), the Sentinels promote the replica, and every client of ours follows without a restart: the
shared sync client (``get_redis``), an asyncio client and the SSE relay (``make_async_pool``), Celery's broker
(``sentinel://`` URLs and ``master_name`` derived from the same settings), a process configured by its
environment alone. A run's stream that the primary acknowledged but never replicated is found short and written
again after a ``reset`` (the worker's coalescer, as after a Redis restart).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from pytest_django.fixtures import Settings

from core.config import RedisConnectionConfig, redis_connection_config_from_env
from core.redis_client import get_redis, make_async_redis
from core.redis_options import (
    SENTINEL_TRANSPORT,
    broker_transport,
    broker_transport_options,
    broker_url,
    broker_use_ssl,
)
from inference_workers.coalescer import DeltaCoalescer
from runs.streaming.contract import RunStreamWriter, StreamEvent, read_after
from runs.streaming.relay import StreamRelay
from tests.redis_servers import MASTER, PASSWORD, SentinelSetup, make_certificates, sentinel_setup, wait_until
from tests.runs.test_stream_units import run_on_own_loop

pytestmark = pytest.mark.live  # its own servers, tens of seconds: not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]
DB = 3
URL = f"redis://:{PASSWORD}@127.0.0.1:1/{DB}"
"""Under Sentinel only the user, password, database and scheme of the URL count: port 1 has no server."""


@pytest.fixture
def ha(tmp_path: Path, settings: Settings) -> Iterator[SentinelSetup]:
    servers = sentinel_setup(tmp_path)
    setup = next(servers)
    settings.REDIS_CONNECTION = replace(
        settings.REDIS_CONNECTION,
        sentinels=tuple(("127.0.0.1", s.port) for s in setup.sentinels),
        sentinel_master=MASTER,
    )
    settings.REDIS_URL = URL
    get_redis.cache_clear()
    try:
        yield setup
    finally:
        get_redis.cache_clear()
        servers.close()


def _fail_over(ha: SentinelSetup) -> None:
    """Kills the primary and waits until the Sentinels name the replica primary and it accepts writes."""
    assert ha.primary_port() == ha.primary.port
    ha.primary.stop(signal.SIGKILL)
    wait_until(lambda: ha.primary_port() == ha.replica.port, what="the Sentinels to promote the replica")
    wait_until(lambda: ha.replica.client().info("replication")["role"] == "master", what="the promoted replica")


def _replicated(ha: SentinelSetup) -> None:
    assert ha.primary.client().execute_command("WAIT", 1, 5000) == 1


def test_every_client_of_ours_and_celerys_broker_follow_a_failover(ha: SentinelSetup) -> None:
    config: RedisConnectionConfig = settings.REDIS_CONNECTION
    broker = Celery("ha-test")
    url = broker_url(URL, config)  # what the settings module derives; the read/write URLs beat the environment's
    broker.conf.update(
        broker_read_url=url,
        broker_write_url=url,
        broker_transport=broker_transport(config),
        broker_transport_options=broker_transport_options(config, socket_timeout=5, socket_connect_timeout=5),
    )
    # One URL (no failover alternates, see core.celery_sentinel); every Sentinel is a transport option.
    assert broker.conf.broker_write_url.count("sentinel://") == 1
    assert len(broker.conf.broker_transport_options["sentinels"]) == 3
    retry = {"max_retries": 60, "interval_start": 0.2, "interval_step": 0.2, "interval_max": 1.0}

    client = get_redis()
    client.set("ha:before", "1")
    assert ha.primary.client(db=DB).get("ha:before") == "1"  # through the Sentinels to the primary
    broker.send_task("ha.probe", args=["before"], queue="ha-queue", retry=True, retry_policy=retry)
    assert ha.primary.client(db=DB).llen("ha-queue") == 1

    async def scenario() -> list[int]:
        async_client = make_async_redis(socket_timeout=5)
        relay = StreamRelay(settings.REDIS_URL)
        try:
            await async_client.set("ha:async-before", "1")
            writer = RunStreamWriter(77)
            writer.append(StreamEvent.DELTA, {"text": "a"})
            sub, _ = await relay.subscribe(77, 0)
            seen = [e.seq for e in await sub.next_batch(10)]
            _replicated(ha)
            await asyncio.get_running_loop().run_in_executor(None, _fail_over, ha)
            # The same client objects, no restart: they reconnect to the promoted replica.
            await async_client.set("ha:async-after", "1")
            assert await async_client.get("ha:async-before") == "1"
            writer.append(StreamEvent.DELTA, {"text": "b"})
            while len(seen) < 2:
                batch = await sub.next_batch(30)
                assert batch, "the relay's reader did not reconnect to the new primary"
                seen.extend(e.seq for e in batch)
            entries, last = await relay.read_after(77, 0)
            assert [e.seq for e in entries] == [1, 2] and last is not None and last.seq == 2
            return seen
        finally:
            await relay.aclose()
            await async_client.aclose()

    seen: list[list[int]] = []

    async def capture() -> None:
        seen.append(await scenario())

    run_on_own_loop(capture())
    assert seen == [[1, 2]]

    promoted = ha.replica.client(db=DB)
    client.set("ha:after", "1")
    assert promoted.get("ha:after") == promoted.get("ha:async-after") == "1"
    broker.send_task("ha.probe", args=["after"], queue="ha-queue", retry=True, retry_policy=retry)
    messages = [json.loads(raw)["headers"]["argsrepr"] for raw in promoted.lrange("ha-queue", 0, -1)]
    assert sorted(messages) == ["['after']", "['before']"]


def test_a_process_configured_by_its_environment_alone_uses_the_sentinels(ha: SentinelSetup) -> None:
    """What a host's environment sets (docs/high-availability.md): REDIS_SENTINELS, REDIS_SENTINEL_MASTER,
    REDIS_URL and CELERY_BROKER_URL (user, password, db); Celery's app (chatproject.celery) and get_redis follow."""
    _fail_over(ha)
    sentinels = ",".join(f"127.0.0.1:{s.port}" for s in ha.sentinels)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatproject.settings.test",
        "REDIS_SENTINELS": sentinels,
        "REDIS_SENTINEL_MASTER": MASTER,
        "REDIS_URL": URL,
        "CELERY_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:1/{DB + 1}",
    }
    script = (
        "import django, json; django.setup()\n"
        "from django.conf import settings\n"
        "from chatproject.celery import app\n"
        "from core.redis_client import get_redis\n"
        "get_redis().set('ha:env', 'yes')\n"
        "app.send_task('ha.probe', queue='ha-env-queue')\n"
        "print(json.dumps({'broker': app.conf.broker_write_url, 'read': app.conf.broker_read_url, "
        "'transport': app.conf.broker_transport, "
        "'master': settings.CELERY_BROKER_TRANSPORT_OPTIONS['master_name']}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["master"] == MASTER
    assert out["read"] == out["broker"]
    assert out["broker"] == f"sentinel://:{PASSWORD}@127.0.0.1:{ha.sentinels[0].port}/{DB + 1}"
    assert out["transport"] == SENTINEL_TRANSPORT
    promoted = ha.replica.client()
    assert promoted.execute_command("SELECT", DB) and promoted.get("ha:env") == "yes"
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    assert ha.replica.client(db=DB + 1).llen(f"{prefix}ha-env-queue") == 1


def test_stream_entries_the_replica_never_got_are_found_missing_and_written_again(ha: SentinelSetup) -> None:
    """The primary acknowledges a delta that never reaches the replica (its link cut while the replica is
    stopped), then dies; after the promotion the worker's coalescer finds the stream short and resends the text
    after a ``reset``: a client that follows the stream ends with the exact text."""
    writer = RunStreamWriter(88, client=get_redis())
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 0.0, max_tokens=1, outage_limit_s=120, retry_s=0.05)
    coalescer.add("Hello", 1)
    _replicated(ha)
    ha.replica.stop(signal.SIGSTOP)  # it reads nothing more
    ha.primary.client().client_kill_filter(_type="replica")  # and its link is gone: what follows stays here
    coalescer.add(" world", 1)
    assert [seq for seq, _ in [(e.seq, e) for e in read_after(88, 0)]] == [1, 2]  # acknowledged by the primary
    ha.primary.stop(signal.SIGKILL)
    ha.replica.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: ha.primary_port() == ha.replica.port, what="the Sentinels to promote the replica")
    assert [e.seq for e in read_after(88, 0, client=ha.replica.client(db=DB))] == [1]  # " world" is gone
    coalescer.add("!", 1)
    coalescer.drain()
    entries = read_after(88, 0)
    events = [e.event for e in entries]
    assert StreamEvent.RESET in events
    text = ""
    for entry in entries:
        if entry.event == StreamEvent.RESET:
            text = ""
        elif entry.event == StreamEvent.DELTA:
            text += entry.data["text"]
    assert text == "Hello world!"
    assert [e.seq for e in entries] == sorted(e.seq for e in entries) and entries[0].seq == 1


def test_the_sentinel_list_is_read_from_the_environment_and_a_malformed_one_fails_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_SENTINELS", " 10.0.0.1:26379, [::1]:26380,")
    assert redis_connection_config_from_env().sentinels == (("10.0.0.1", 26379), ("::1", 26380))
    monkeypatch.setenv("REDIS_SENTINELS", "10.0.0.1")
    with pytest.raises(ValueError, match=re.escape("REDIS_SENTINELS: '10.0.0.1' is not host:port")):
        redis_connection_config_from_env()
    monkeypatch.delenv("REDIS_SENTINELS")
    config = redis_connection_config_from_env()
    assert not config.uses_sentinel
    assert broker_url("redis://:pw@h:1/2", config) == "redis://:pw@h:1/2"
    assert broker_transport_options(config, socket_timeout=1, socket_connect_timeout=1) == {}


def test_sentinel_and_tls_together_follow_a_failover(tmp_path: Path, settings: Settings) -> None:
    """Every server on a TLS port only (the Sentinels and replication too): ``rediss://``, ``REDIS_TLS_CA_FILE``
    and ``REDIS_SENTINEL_TLS``; the sync and asyncio clients and Celery's broker follow the failover over TLS. The
    Sentinels name the primary by IP address: the servers' certificates must carry it (here 127.0.0.1)."""
    certs = make_certificates(tmp_path / "certs")
    servers = sentinel_setup(tmp_path / "ha", tls=certs)
    ha = next(servers)
    url = f"rediss://:{PASSWORD}@127.0.0.1:1/{DB}"
    try:
        config = replace(
            settings.REDIS_CONNECTION,
            sentinels=tuple(("127.0.0.1", s.port) for s in ha.sentinels),
            sentinel_master=MASTER,
            tls_ca_file=str(certs.ca),
            sentinel_tls=True,
        )
        settings.REDIS_CONNECTION = config
        settings.REDIS_URL = url
        get_redis.cache_clear()
        broker = Celery("ha-tls-test")
        broker.conf.update(
            broker_read_url=broker_url(url, config),
            broker_write_url=broker_url(url, config),
            broker_use_ssl=broker_use_ssl(url, config),
            broker_transport=broker_transport(config),
            broker_transport_options=broker_transport_options(config, socket_timeout=5, socket_connect_timeout=5),
        )
        retry = {"max_retries": 60, "interval_start": 0.2, "interval_step": 0.2, "interval_max": 1.0}
        get_redis().set("tls:before", "1")
        broker.send_task("ha.probe", queue="ha-tls-queue", retry=True, retry_policy=retry)
        assert ha.primary.client(db=DB).get("tls:before") == "1"
        _replicated(ha)
        _fail_over(ha)
        get_redis().set("tls:after", "1")
        broker.send_task("ha.probe", queue="ha-tls-queue", retry=True, retry_policy=retry)

        async def async_write() -> None:
            client = make_async_redis(socket_timeout=5)
            try:
                await client.set("tls:async", "1")
            finally:
                await client.aclose()

        run_on_own_loop(async_write())
        promoted = ha.replica.client(db=DB)
        assert promoted.get("tls:after") == promoted.get("tls:async") == "1"
        assert promoted.llen("ha-tls-queue") == 2
    finally:
        get_redis.cache_clear()
        servers.close()


_PROBE_APP = """
import json, os, time
from celery import Celery

app = Celery("ha-probe")
app.conf.update(json.loads(os.environ["PROBE_CELERY_CONF"]))


@app.task(name="ha.sleep")
def sleep(seconds, tag):
    time.sleep(seconds)
    print(f"DONE {tag}", flush=True)
"""


def test_a_worker_holding_an_unacknowledged_task_follows_a_failover(ha: SentinelSetup, tmp_path: Path) -> None:
    """A Celery worker set up as ours (late acks, prefetch 1, task events, thread pool, the settings' broker URL,
    transport and options) holds an unacknowledged task while the primary is killed: it reconnects to the promoted
    replica and goes on consuming. With kombu's failover alternates it died here with ``Unrecoverable error:
    AttributeError("'NoneType' object has no attribute 'hostname'")`` (core.celery_sentinel)."""
    config: RedisConnectionConfig = settings.REDIS_CONNECTION
    url = broker_url(f"redis://:{PASSWORD}@127.0.0.1:1/{DB + 2}", config)
    conf = {
        "broker_read_url": url,  # as the settings module: over the environment's CELERY_BROKER_URL
        "broker_write_url": url,
        "broker_transport": broker_transport(config),
        "broker_transport_options": broker_transport_options(config, socket_timeout=5, socket_connect_timeout=5),
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_send_task_events": True,
        "task_ignore_result": True,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
    }
    (tmp_path / "probe_app.py").write_text(_PROBE_APP)
    env = {**os.environ, "PROBE_CELERY_CONF": json.dumps(conf), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    log_path = tmp_path / "worker.log"
    celery_bin = str(Path(sys.executable).with_name("celery"))
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [celery_bin, "-A", "probe_app", "worker", "-P", "threads", "-c", "2", "-E", "-Q", "ha-probe", "-l", "info"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    sender = Celery("ha-probe-sender")
    sender.conf.update(conf)
    retry = {"max_retries": 60, "interval_start": 0.2, "interval_step": 0.2, "interval_max": 1.0}
    try:
        wait_until(lambda: "ready." in log_path.read_text(), what="the worker to start")
        sender.send_task("ha.sleep", args=[6, "spanning"], queue="ha-probe")
        wait_until(lambda: "ha.sleep[" in log_path.read_text(), what="the worker to take the task")
        _replicated(ha)  # the task is in the replica's unacknowledged set too
        _fail_over(ha)
        sender.send_task("ha.sleep", args=[0, "after"], queue="ha-probe", retry=True, retry_policy=retry)
        wait_until(lambda: "DONE after" in log_path.read_text() or worker.poll() is not None, what="the new task")
        text = log_path.read_text()
        assert worker.poll() is None, text[-4000:]
        assert "Unrecoverable error" not in text, text[-4000:]
        assert "DONE after" in text
        wait_until(lambda: "DONE spanning" in log_path.read_text(), what="the task that spanned the failover")
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
