"""The two queue stores as fixtures: ``store`` runs a test over both backends (the real Redis the tests use, and
memory), ``redis_store`` over Redis alone (what only Redis can show)."""

from __future__ import annotations

import pytest
import redis

from scheduling.memory_store import MemoryQueueStore
from scheduling.redis_store import RedisQueueStore
from scheduling.store import QueueStore

TIERS = ["pro", "plus", "free", "batch"]


@pytest.fixture
def redis_store(clean_redis: redis.Redis) -> RedisQueueStore:
    return RedisQueueStore(clean_redis, tiers=TIERS)


@pytest.fixture(params=["redis", "memory"])
def store(request: pytest.FixtureRequest, redis_store: RedisQueueStore) -> QueueStore:
    """The tests that hold for any ``QueueStore`` run over both: the dispatcher must not care which it has."""
    if request.param == "redis":
        return redis_store
    return MemoryQueueStore(tiers=TIERS)
