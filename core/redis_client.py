"""One Redis connection pool per process, from settings.REDIS_URL."""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings


@lru_cache(maxsize=1)
def get_redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, decode_responses=True, health_check_interval=30, socket_connect_timeout=5
    )
