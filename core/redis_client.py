"""One Redis connection pool per process, from settings.REDIS_URL.

Every command has a socket timeout (``REDIS_SOCKET_TIMEOUT_S``): a paused or stalled server makes it fail with
``redis.TimeoutError`` in seconds, which the API answers with a 503 (``core.errors.BackendOutageMiddleware``).
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings


@lru_cache(maxsize=1)
def get_redis() -> redis.Redis:
    outages = settings.OUTAGES
    return redis.Redis.from_url(
        settings.REDIS_URL,
        decode_responses=True,
        health_check_interval=30,
        socket_timeout=outages.redis_socket_timeout_s,
        socket_connect_timeout=outages.redis_connect_timeout_s,
    )
