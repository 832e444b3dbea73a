"""Embedding text with an embedding deployment: ``embed(texts, deployment) -> list[vector]``.

What ``/v1/embeddings`` calls, and what a pass in front of the queue (the semantic cache) can call before every
prompt: the texts are tokenized here with the deployment's tokenizer (loaded once per process), sent to the
deployment's embedding workers over Redis (``generation.embedding_contract``: one round trip each way, batched on
the worker with whatever else is waiting) and come back as float32 vectors. No database access: ``deployment`` is
the snapshot selection returned (``deployments.selection.resolve_model(spec, kind="embed")``).

A deployment with no worker answering within ``EMBEDDING_TIMEOUT_S`` is :class:`EmbeddingUnavailable` (503,
``Retry-After``); a worker that fails the batch is :class:`EmbeddingFailed` (502).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings

from core.errors import DomainError
from core.redis_client import make_async_redis, make_redis
from deployments import worker_rpc
from deployments.embedding_model import EmbeddingModelError, EmbeddingSpec, read_spec
from deployments.selection import Served
from deployments.tokenizer import load_tokenizer
from generation.embedding_contract import EmbeddingRequest, embedding_queue, parse_reply, unpack_vector

RETRY_AFTER_S = 5

Vector = list[float]


class EmbeddingUnavailable(DomainError):
    status_code = 503
    code = "embedding_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": str(RETRY_AFTER_S)})


class EmbeddingFailed(DomainError):
    status_code = 502
    code = "embedding_failed"


@functools.lru_cache(maxsize=32)
def _spec(local_path: str) -> EmbeddingSpec:
    return read_spec(Path(local_path))


def embedding_spec(deployment: Served) -> EmbeddingSpec:
    """The deployment's dimensions, length limit and pooling (read from its files once per process);
    :class:`EmbeddingUnavailable` while its folder cannot be read."""
    try:
        return _spec(deployment.local_path)
    except (EmbeddingModelError, OSError) as exc:
        raise EmbeddingUnavailable(
            f"The model {deployment.key} cannot be read here yet ({exc}); retry shortly."
        ) from exc


def tokenizer_of(deployment: Served, *, wait: bool = False) -> Any:
    """The deployment's tokenizer (``ModelNotReady``, a 503, while it cannot load; ``wait=False``: never queue
    behind a load in progress)."""
    return load_tokenizer(deployment.local_path, wait=wait)


def tokenize(
    texts: list[str], deployment: Served, *, truncate_to: int | None = None, truncation_side: str = "right"
) -> list[list[int]]:
    """Each text as the model's ids (``[CLS] ... [SEP]`` for BERT), cut to ``truncate_to`` tokens (special tokens
    included) when given: ``right`` keeps the first tokens, ``left`` the last, as vLLM's ``truncation_side``."""
    if not texts:
        return []
    tokenizer = tokenizer_of(deployment)
    if truncate_to is None:
        return [list(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]]
    prefix, suffix = _special_tokens(deployment.local_path)
    room = max(0, truncate_to - len(prefix) - len(suffix))
    result: list[list[int]] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        kept = ids[:room] if truncation_side == "right" else ids[len(ids) - room :] if room else []
        result.append([*prefix, *kept, *suffix])
    return result


@functools.lru_cache(maxsize=32)
def _special_tokens(local_path: str) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text (``[CLS]`` and ``[SEP]`` for BERT), found by encoding one
    word with and without them (transformers 5's tokenizers no longer expose ``build_inputs_with_special_tokens``)."""
    tokenizer = load_tokenizer(local_path, wait=False)
    bare = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    return [], []


def embed(texts: list[str], deployment: Served, *, timeout_s: float | None = None) -> list[Vector]:
    """One vector per text (each cut to the model's length): the call a pass in front of the queue makes."""
    return embed_ids(
        tokenize(texts, deployment, truncate_to=embedding_spec(deployment).max_tokens), deployment, timeout_s=timeout_s
    )


def embed_ids(inputs: list[list[int]], deployment: Served, *, timeout_s: float | None = None) -> list[Vector]:
    """One vector per token-id list (each within the model's length); blocks up to ``timeout_s``."""
    if not inputs:
        return []
    request = _request(inputs, timeout_s)
    try:
        raw = worker_rpc.call(
            _sync_client(),
            queue=embedding_queue(deployment.key),
            request=request.to_json(),
            reply_key=request.reply_key,
            deadline=request.deadline,
        )
    except redis.RedisError as exc:
        raise EmbeddingUnavailable(f"Embeddings cannot reach Redis ({exc.__class__.__name__}); retry shortly.") from exc
    return _vectors(raw, deployment, expected=len(inputs))


async def embed_ids_async(
    inputs: list[list[int]], deployment: Served, *, timeout_s: float | None = None
) -> list[Vector]:
    """:func:`embed_ids` for an async view: the wait holds a Redis connection but no thread."""
    if not inputs:
        return []
    request = _request(inputs, timeout_s)
    try:
        raw = await worker_rpc.call_async(
            _async_client(),
            queue=embedding_queue(deployment.key),
            request=request.to_json(),
            reply_key=request.reply_key,
            deadline=request.deadline,
        )
    except redis.RedisError as exc:
        raise EmbeddingUnavailable(f"Embeddings cannot reach Redis ({exc.__class__.__name__}); retry shortly.") from exc
    return _vectors(raw, deployment, expected=len(inputs))


def _request(inputs: list[list[int]], timeout_s: float | None) -> EmbeddingRequest:
    wait = settings.EMBEDDINGS.timeout_s if timeout_s is None else timeout_s
    return EmbeddingRequest(inputs=inputs, deadline=time.time() + wait)


def _vectors(raw: str | None, deployment: Served, *, expected: int) -> list[Vector]:
    if raw is None:
        raise EmbeddingUnavailable(
            f"No embedding worker of {deployment.key} answered within {settings.EMBEDDINGS.timeout_s:g} s; retry "
            "shortly."
        )
    packed, error = parse_reply(raw)
    if error is not None or len(packed) != expected:
        raise EmbeddingFailed(f"The embedding worker of {deployment.key} failed: {error or 'wrong number of vectors'}.")
    return [unpack_vector(item) for item in packed]


@functools.lru_cache(maxsize=1)
def _sync_client() -> redis.Redis:
    """The shared Redis with a socket timeout longer than the longest wait for a reply (``get_redis``' is 5 s)."""
    return make_redis(socket_connect_timeout=5, socket_timeout=settings.EMBEDDINGS.timeout_s + 5)


_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()
_async_lock = threading.Lock()


def _async_client() -> aioredis.Redis:
    """One asyncio Redis client per event loop (a client's connections belong to the loop that made them)."""
    loop = asyncio.get_running_loop()
    with _async_lock:
        client = _async_clients.get(loop)
        if client is None:
            client = make_async_redis(  # a reply may take up to EMBEDDING_TIMEOUT_S: the socket waits longer
                socket_connect_timeout=5, socket_timeout=settings.EMBEDDINGS.timeout_s + 5
            )
            _async_clients[loop] = client
        return client
