"""The caller's side of a request/answer call to a deployment's workers over Redis lists (embeddings:
``generation.embedding_contract``; guard steps: ``generation.guard_contract``): push the request on the deployment's
queue (which expires when nobody pushes for an hour), then wait on the request's own reply key until its deadline.
One round trip each way; the worker batches whatever is waiting on the queue."""

from __future__ import annotations

import time

import redis
import redis.asyncio as aioredis

QUEUE_TTL_S = 3600
"""A queue key expires when no caller has pushed for this long (a deployment nobody calls leaves nothing)."""


def call(client: redis.Redis, *, queue: str, request: str, reply_key: str, deadline: float) -> str | None:
    """Pushes ``request`` on ``queue`` and waits for its answer on ``reply_key`` until ``deadline`` (Unix time); None
    when no worker answered in time. Raises ``redis.RedisError``."""
    pipe = client.pipeline(transaction=False)
    pipe.rpush(queue, request)
    pipe.expire(queue, QUEUE_TTL_S)
    pipe.execute()
    answer = client.blpop([reply_key], timeout=max(0.01, deadline - time.time()))
    return str(answer[1]) if answer else None


async def call_async(
    client: aioredis.Redis, *, queue: str, request: str, reply_key: str, deadline: float
) -> str | None:
    """:func:`call` for an async caller: the wait holds a Redis connection but no thread."""
    async with client.pipeline(transaction=False) as pipe:
        pipe.rpush(queue, request)
        pipe.expire(queue, QUEUE_TTL_S)
        await pipe.execute()
    answer = await client.blpop([reply_key], timeout=max(0.01, deadline - time.time()))
    return str(answer[1]) if answer else None
