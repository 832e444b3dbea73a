"""Redis over TLS: a ``redis-server`` with only a ``tls-port`` and a certificate of a throwaway CA; with a
``rediss://`` URL and ``REDIS_TLS_CA_FILE`` the sync client, an asyncio client, the SSE relay and Celery's broker
(``broker_use_ssl`` from the same settings) work, and a client that trusts another CA fails with a clear
certificate error instead of talking in the clear."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings
from pytest_django.fixtures import Settings

from core.redis_client import get_redis, make_async_redis
from core.redis_options import broker_use_ssl
from runs.streaming.contract import RunStreamWriter, StreamEvent
from runs.streaming.relay import StreamRelay
from tests.redis_servers import PASSWORD, Certificates, Server, claim_port, make_certificates, start_server
from tests.runs.test_stream_units import run_on_own_loop


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path / "certs")


@pytest.fixture
def tls_redis(tmp_path: Path, certificates: Certificates) -> Iterator[Server]:
    port = claim_port(set())
    config = (
        f"port 0\ntls-port {port}\ntls-cert-file {certificates.cert}\ntls-key-file {certificates.key}\n"
        f"tls-ca-cert-file {certificates.ca}\ntls-auth-clients no\nrequirepass {PASSWORD}\n"
    )
    server = start_server(
        tmp_path / "tls",
        port,
        config=config,
        client_options={"password": PASSWORD, "ssl": True, "ssl_ca_certs": str(certificates.ca)},
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def over_tls(settings: Settings, tls_redis: Server, certificates: Certificates) -> Iterator[str]:
    url = f"rediss://:{PASSWORD}@localhost:{tls_redis.port}/2"
    settings.REDIS_URL = url
    settings.REDIS_CONNECTION = replace(settings.REDIS_CONNECTION, tls_ca_file=str(certificates.ca))
    get_redis.cache_clear()
    try:
        yield url
    finally:
        get_redis.cache_clear()


def test_every_client_of_ours_and_celerys_broker_talk_tls_with_the_configured_ca(
    over_tls: str, tls_redis: Server
) -> None:
    client = get_redis()
    client.set("tls:sync", "1")
    assert tls_redis.client(db=2).get("tls:sync") == "1"
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"

    async def scenario() -> None:
        async_client = make_async_redis(socket_timeout=5)
        relay = StreamRelay(settings.REDIS_URL)
        try:
            await async_client.set("tls:async", "1")
            assert await async_client.get("tls:sync") == "1"
            RunStreamWriter(5).append(StreamEvent.DELTA, {"text": "x"})
            sub, _ = await relay.subscribe(5, 0)  # the relay's own reader connection, over TLS too
            assert [e.seq for e in await sub.next_batch(10)] == [1]
            entries, _ = await relay.read_after(5, 0)
            assert [e.seq for e in entries] == [1]
        finally:
            await relay.aclose()
            await async_client.aclose()

    run_on_own_loop(scenario())
    assert tls_redis.client(db=2).get("tls:async") == "1"

    use_ssl = broker_use_ssl(over_tls, settings.REDIS_CONNECTION)
    assert use_ssl is not None and use_ssl["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    broker = Celery("tls-test")
    broker.conf.update(broker_read_url=over_tls, broker_write_url=over_tls, broker_use_ssl=use_ssl)
    broker.send_task("tls.probe", queue="tls-queue")
    assert tls_redis.client(db=2).llen("tls-queue") == 1


def test_a_server_whose_certificate_another_ca_signed_is_refused(
    over_tls: str, settings: Settings, certificates: Certificates
) -> None:
    settings.REDIS_CONNECTION = replace(settings.REDIS_CONNECTION, tls_ca_file=str(certificates.other_ca))
    get_redis.cache_clear()
    with pytest.raises(redis.ConnectionError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        get_redis().ping()

    async def async_ping() -> None:
        client = make_async_redis(socket_timeout=5)
        try:
            await client.ping()
        finally:
            await client.aclose()

    with pytest.raises(redis.ConnectionError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        asyncio.run(async_ping())


def test_a_plain_client_gets_nothing_from_the_tls_port(tls_redis: Server) -> None:
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=tls_redis.port, password=PASSWORD, socket_timeout=3, retry_on_error=[]).ping()
