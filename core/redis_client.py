"""Every Redis client of a process comes from here: the shared sync client (:func:`get_redis`), sync clients with
other timeouts (:func:`make_redis`), asyncio clients and pools (:func:`make_async_redis`, :func:`make_async_pool`).

Every command has a socket timeout (``REDIS_SOCKET_TIMEOUT_S``): a paused or stalled server makes it fail with
``redis.TimeoutError`` in seconds, which the API answers with a 503 (``core.errors.BackendOutageMiddleware``).

The URL (``REDIS_URL``) gives the user, password, database and scheme (``rediss://``: TLS, checked against
``REDIS_TLS_CA_FILE``). With ``REDIS_SENTINELS`` set, the host and port come from the Sentinels instead: a client
asks them for the current primary whenever it opens a connection, so after a failover (the primary's connections
fail, redis-py retries) it writes to the promoted replica without a restart (docs/high-availability.md).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.connection import parse_url
from redis.sentinel import Sentinel

from core.config import RedisConnectionConfig
from core.redis_options import sentinel_options, tls_options


class BlockingSentinelConnectionPool(AsyncSentinelConnectionPool, aioredis.BlockingConnectionPool):
    """A Sentinel pool that waits for a free connection (up to ``timeout``) instead of failing when all are taken."""


def _config() -> RedisConnectionConfig:
    config: RedisConnectionConfig = settings.REDIS_CONNECTION
    return config


def _sentinel_options(config: RedisConnectionConfig) -> dict[str, Any]:
    outages = settings.OUTAGES
    return sentinel_options(
        config,
        socket_timeout=outages.redis_socket_timeout_s,
        socket_connect_timeout=outages.redis_connect_timeout_s,
    )


def _primary_options(url: str, config: RedisConnectionConfig) -> dict[str, Any]:
    """What a connection to the primary takes from ``url`` under Sentinel: user, password, db, TLS (not the host)."""
    parsed = parse_url(url)
    options = {key: parsed[key] for key in ("username", "password", "db") if parsed.get(key) is not None}
    if url.startswith("rediss://"):
        options.update(ssl=True, **tls_options(config))
    return options


def _direct_options(url: str, config: RedisConnectionConfig) -> dict[str, Any]:
    return tls_options(config) if url.startswith("rediss://") else {}


def make_redis(
    url: str | None = None,
    *,
    socket_timeout: float | None,
    socket_connect_timeout: float | None = None,
    decode_responses: bool = True,
    **extra: Any,
) -> redis.Redis:
    """A sync client of ``url`` (default ``REDIS_URL``): directly, or to the Sentinels' current primary."""
    config = _config()
    url = url or settings.REDIS_URL
    options: dict[str, Any] = {
        "decode_responses": decode_responses,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout or settings.OUTAGES.redis_connect_timeout_s,
        **extra,
    }
    if not config.uses_sentinel:
        return redis.Redis.from_url(url, **options, **_direct_options(url, config))
    sentinel = Sentinel(list(config.sentinels), sentinel_kwargs=_sentinel_options(config), **options)
    client: redis.Redis = sentinel.master_for(
        config.sentinel_master, redis_class=redis.Redis, **_primary_options(url, config)
    )
    return client


def make_async_pool(
    url: str | None = None,
    *,
    socket_timeout: float | None,
    socket_connect_timeout: float | None = None,
    decode_responses: bool = True,
    max_connections: int | None = None,
    wait_timeout: float | None = None,
) -> aioredis.ConnectionPool:
    """An asyncio pool of ``url`` (default ``REDIS_URL``), directly or to the Sentinels' current primary; with
    ``wait_timeout`` a full pool makes a caller wait that long for a free connection (a ``BlockingConnectionPool``).
    """
    config = _config()
    url = url or settings.REDIS_URL
    options: dict[str, Any] = {
        "decode_responses": decode_responses,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout or settings.OUTAGES.redis_connect_timeout_s,
    }
    if max_connections is not None:
        options["max_connections"] = max_connections
    if wait_timeout is not None:
        options["timeout"] = wait_timeout
    if not config.uses_sentinel:
        pool_class = aioredis.BlockingConnectionPool if wait_timeout is not None else aioredis.ConnectionPool
        return pool_class.from_url(url, **options, **_direct_options(url, config))
    sentinel = AsyncSentinel(list(config.sentinels), sentinel_kwargs=_sentinel_options(config))
    sentinel_pool = BlockingSentinelConnectionPool if wait_timeout is not None else AsyncSentinelConnectionPool
    return sentinel_pool(config.sentinel_master, sentinel, **options, **_primary_options(url, config))


def make_async_redis(url: str | None = None, **pool_options: Any) -> aioredis.Redis:
    """An asyncio client over its own :func:`make_async_pool` (closed with the client)."""
    return aioredis.Redis.from_pool(make_async_pool(url, **pool_options))


@lru_cache(maxsize=1)
def get_redis() -> redis.Redis:
    """The process's shared client of ``REDIS_URL``, with the outage timeouts."""
    outages = settings.OUTAGES
    return make_redis(
        health_check_interval=30,
        socket_timeout=outages.redis_socket_timeout_s,
        socket_connect_timeout=outages.redis_connect_timeout_s,
    )
