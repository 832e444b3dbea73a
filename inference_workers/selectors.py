"""Reads of the workers' state in Redis (the dispatcher and the reaper use these)."""

from __future__ import annotations

import redis

from chatproject.redis_client import get_redis
from inference_workers.heartbeats import HEARTBEAT_PREFIX, WorkerHeartbeat, heartbeat_key, run_lease_key


def worker_heartbeats(*, client: redis.Redis | None = None) -> list[WorkerHeartbeat]:
    """Every live worker's latest heartbeat (a heartbeat vanishes with its TTL when the worker dies)."""
    client = client or get_redis()
    keys = sorted(client.scan_iter(match=f"{HEARTBEAT_PREFIX}*", count=100))
    if not keys:
        return []
    return [WorkerHeartbeat.from_json(str(raw)) for raw in client.mget(keys) if raw]


def worker_is_alive(*, worker: str, client: redis.Redis | None = None) -> bool:
    client = client or get_redis()
    return bool(client.exists(heartbeat_key(worker)))


def run_lease_holder(*, run_id: int, client: redis.Redis | None = None) -> str | None:
    """``"<worker>#<attempt>"`` of the worker generating the run, or None when nobody holds it."""
    client = client or get_redis()
    holder = client.get(run_lease_key(run_id))
    return str(holder) if holder is not None else None
