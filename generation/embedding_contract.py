"""The call between the web tier (or any caller of ``deployments.embeddings.embed``) and the embedding workers.

A synchronous RPC over Redis lists, not a Celery task: an embedding is one forward pass of a few milliseconds, and
the semantic cache will call it before every prompt, so the call must cost about one Redis round trip each way.
The caller ``RPUSH``es a request on its deployment's queue and ``BLPOP``s its own reply key; a worker ``BLPOP``s the
queue, drains whatever else is waiting into the same forward pass (up to its batch size), and pushes each request's
vectors to its reply key. Any number of workers of a deployment share its queue; a request nobody takes before its
deadline is dropped by the worker that finds it late (the caller has answered 503 by then).

A worker of an embedding deployment lists itself ready in ``deployment:{key}:ready`` (the key chat workers' heartbeats
write, ``generation.worker_contract``), so selection sees it like any worker; it does not join ``workers:live``,
whose members the dispatcher reads as generation capacity.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from dataclasses import asdict, dataclass, field

import redis

from generation.worker_contract import deployment_ready_key

QUEUE_PREFIX = "emb:queue:"
REPLY_PREFIX = "emb:reply:"
REPLY_TTL_S = 60
READY_TTL_S = 10
"""An embedding worker refreshes its ready marker every few seconds; a dead one drops out after this."""


def embedding_queue(deployment: str) -> str:
    return f"{QUEUE_PREFIX}{deployment}"


@dataclass(frozen=True)
class EmbeddingRequest:
    inputs: list[list[int]]
    """Token ids of each input, special tokens included, at most the model's length."""
    deadline: float
    """Unix time after which the caller no longer waits (the worker skips it)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def reply_key(self) -> str:
        return f"{REPLY_PREFIX}{self.id}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> EmbeddingRequest:
        data = json.loads(raw)
        return cls(
            inputs=[[int(t) for t in ids] for ids in data["inputs"]], deadline=float(data["deadline"]), id=data["id"]
        )


def pack_vector(vector: list[float]) -> str:
    """Little-endian float32, base64: a quarter of the JSON floats' size, and exactly what OpenAI's ``base64``
    encoding sends."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def unpack_vector(packed: str) -> list[float]:
    raw = base64.b64decode(packed)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def reply_json(*, vectors: list[list[float]] | None = None, error: str | None = None) -> str:
    return json.dumps({"vectors": [pack_vector(v) for v in vectors or []], "error": error}, separators=(",", ":"))


def parse_reply(raw: str) -> tuple[list[str], str | None]:
    """The packed vectors and the worker's error (None when it embedded them)."""
    data = json.loads(raw)
    return list(data.get("vectors") or []), data.get("error")


def mark_ready(deployment: str, worker: str, *, client: redis.Redis, ttl_s: int = READY_TTL_S) -> None:
    """``worker`` serves ``deployment`` for the next ``ttl_s`` seconds (what selection counts)."""
    now = time.time()
    pipe = client.pipeline(transaction=False)
    pipe.zadd(deployment_ready_key(deployment), {worker: now + ttl_s})
    pipe.zremrangebyscore(deployment_ready_key(deployment), "-inf", f"({now}")
    pipe.execute()


def unmark_ready(deployment: str, worker: str, *, client: redis.Redis) -> None:
    client.zrem(deployment_ready_key(deployment), worker)
