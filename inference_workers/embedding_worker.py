"""The embedding worker: one process serving one embedding deployment (``manage.py run_embedding_worker``).

It loads the deployment's model once (``deployments.embedding_model.EmbeddingModel``: ``transformers`` + torch on
the CPU, the runtime ``docs/embeddings.md`` explains the choice of), then loops: ``BLPOP`` the deployment's queue,
drain whatever else is waiting into the same batch (up to ``EMBEDDING_WORKER_MAX_BATCH`` inputs), run the batch
through the model in forward passes of at most that many inputs (sorted by length, so padding stays small), and
push each request's vectors to its reply key (``generation.embedding_contract``). Concurrent callers thus share a
forward pass: batching is what makes 32 concurrent requests cost far less than 32 single ones.

A heartbeat thread lists the worker ready for its deployment every few seconds while the deployment is ``ready``
(not while it drains); a retired deployment stops the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from deployments.embedding_model import EmbeddingModel
from deployments.models import DeploymentStatus
from generation.embedding_contract import (
    READY_TTL_S,
    REPLY_TTL_S,
    EmbeddingRequest,
    embedding_queue,
    mark_ready,
    reply_json,
    unmark_ready,
)

logger = logging.getLogger(__name__)

POLL_S = 1.0
HEARTBEAT_S = READY_TTL_S / 3


class EmbeddingWorker:
    """Serves ``deployment`` (its ``name@version``) from ``model`` until ``stop`` is set."""

    def __init__(
        self,
        *,
        deployment: str,
        model: EmbeddingModel,
        name: str,
        client: redis.Redis,
        max_batch: int,
        status: Callable[[], str | None],
    ) -> None:
        self.deployment = deployment
        self.model = model
        self.name = name
        self.client = client
        self.max_batch = max(1, max_batch)
        self.status = status
        """Reads the deployment's status (the worker advertises itself only while it is ``ready``); None: the row
        cannot be read now (the worker keeps what it last saw: deployments are retired, never deleted)."""
        self.stop = threading.Event()
        self.served_inputs = 0

    def run(self) -> None:
        beat = threading.Thread(target=self._heartbeat, name="embedding-heartbeat", daemon=True)
        beat.start()
        try:
            while not self.stop.is_set():
                batch = self.take()
                if batch:
                    self.serve(batch)
        finally:
            self.stop.set()
            unmark_ready(self.deployment, self.name, client=self.client)

    def _heartbeat(self) -> None:
        while not self.stop.is_set():
            try:
                status = self.status()
                if status is None:
                    pass
                elif status == DeploymentStatus.READY:
                    mark_ready(self.deployment, self.name, client=self.client)
                else:
                    unmark_ready(self.deployment, self.name, client=self.client)
                    if status == DeploymentStatus.RETIRED:
                        logger.info("embedding deployment %s retired: stopping", self.deployment)
                        self.stop.set()
            except Exception:  # a Redis or database hiccup: try again at the next beat
                logger.exception("embedding worker heartbeat failed")
            self.stop.wait(HEARTBEAT_S)

    def take(self) -> list[EmbeddingRequest]:
        """The requests waiting (blocks up to ``POLL_S`` for the first), at most ``max_batch`` inputs beyond the
        first request."""
        queue = embedding_queue(self.deployment)
        first = self.client.blpop([queue], timeout=POLL_S)
        if first is None:
            return []
        requests = [EmbeddingRequest.from_json(str(first[1]))]
        inputs = len(requests[0].inputs)
        while inputs < self.max_batch:
            raw = self.client.lpop(queue)
            if raw is None:
                break
            request = EmbeddingRequest.from_json(str(raw))
            requests.append(request)
            inputs += len(request.inputs)
        return requests

    def serve(self, requests: list[EmbeddingRequest]) -> None:
        """Embeds every live request's inputs in shared forward passes and answers each on its reply key."""
        now = time.time()
        live = [r for r in requests if r.deadline > now]
        if len(live) < len(requests):
            logger.warning("dropped %d embedding request(s) past their deadline", len(requests) - len(live))
        limit = self.model.spec.max_tokens
        answers: dict[str, str] = {}
        flat: list[tuple[int, int, list[int]]] = []  # (request index, input index, ids)
        for index, request in enumerate(live):
            longest = max((len(ids) for ids in request.inputs), default=0)
            if longest > limit or any(not ids for ids in request.inputs):
                answers[request.id] = reply_json(error=f"an input is empty or longer than {limit} tokens")
                continue
            flat.extend((index, position, ids) for position, ids in enumerate(request.inputs))
        vectors: dict[tuple[int, int], list[float]] = {}
        flat.sort(key=lambda item: len(item[2]))
        try:
            for start in range(0, len(flat), self.max_batch):
                chunk = flat[start : start + self.max_batch]
                for (index, position, _), vector in zip(
                    chunk, self.model.embed([ids for _, _, ids in chunk]), strict=True
                ):
                    vectors[(index, position)] = vector
        except Exception as exc:  # the model failed the batch: every request in it learns why
            logger.exception("embedding batch failed")
            failure = reply_json(error=f"{exc.__class__.__name__}: {exc}")
            answers.update({r.id: failure for r in live if r.id not in answers})
        for index, request in enumerate(live):
            if request.id not in answers:
                answers[request.id] = reply_json(vectors=[vectors[(index, p)] for p in range(len(request.inputs))])
        self.served_inputs += len(flat)
        pipe = self.client.pipeline(transaction=False)
        for request in live:
            pipe.rpush(request.reply_key, answers[request.id])
            pipe.expire(request.reply_key, REPLY_TTL_S)
        pipe.execute()
