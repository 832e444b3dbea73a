"""Everything the web tier and the GPU workers agree on, in one place: task names, how work is sent, cancel
signals, heartbeats and run leases.

The web side (``runs``, ``chats``) sends tasks **by name** through Celery's current app and never imports
the worker app; the workers (``inference_workers``) register the tasks under these names and keep these
keys alive. Changing anything here changes the wire between the two: deploy both sides together.

Redis keys:

* ``worker:heartbeat:{worker}``: the worker's latest :class:`WorkerHeartbeat` (JSON), with a TTL of
  ``WORKERS.heartbeat_ttl_s``: it vanishes that long after the worker dies.
* ``workers:live``: a sorted set of worker names scored by the Unix time their latest heartbeat expires,
  so a reader finds the live workers in two round trips (``ZRANGEBYSCORE`` + ``MGET``) instead of a ``SCAN``
  of the whole keyspace, which holds a stream per recent run (the dispatcher reads them every tick). Each
  heartbeat drops the names whose heartbeat has expired.
* ``run:{id}:lease``: held by the worker generating the run (``"<worker>/<pid>-<nonce>"``), refreshed with
  the heartbeat; the reaper requeues a streaming run whose lease is gone.
* ``run:{id}:cancel``: set (with a TTL) when a streaming run is to be aborted; ``runs:cancel`` is the pub/sub
  channel that carries the run id so the worker reacts within one engine step.
* ``chat:{id}:summary-pending``: set while a chat's summary task is queued or running (one at a time).
* ``deployment:{name@version}:ready``: a sorted set of the workers of that deployment that heartbeat ``ready``
  (warmed up, consuming its queues), scored like ``workers:live``; the web answers a prompt for a deployment with
  none 503 (:func:`ready_worker_counts`).
* ``worker:metrics:{worker}``: the worker's latest :class:`EngineMetricsSnapshot` (JSON: its engine's ``vllm:*``
  families in Prometheus' text format), rewritten every ``WORKERS.metrics_publish_s`` with a TTL of
  :func:`engine_metrics_ttl_s`; the web's ``/metrics`` merges every snapshot still there.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import redis
from celery import current_app
from django.conf import settings

from core.config import WorkerConfig
from core.redis_client import get_redis

GENERATE_TASK = "inference_workers.generate"
"""``generate(run_id, engine_priority=None)``: one run on the worker's engine (acks late; idempotent for
redeliveries), at vLLM priority ``engine_priority`` (None: the run's tier priority)."""
SUMMARIZE_TASK = "inference_workers.summarize"
"""``summarize(chat_id)``: refresh a chat's rolling summary at the lowest engine priority."""

HEARTBEAT_PREFIX = "worker:heartbeat:"
READY_DEPLOYMENT_PREFIX = "deployment:"
LIVE_WORKERS_KEY = "workers:live"
ENGINE_METRICS_PREFIX = "worker:metrics:"
ENGINE_METRIC_FAMILY_PREFIX = "vllm:"
"""Only the engine's own families travel (not the worker process's ``process_*``/``python_*`` ones, which would
clash between workers, nor anything that could shadow the web's ``chat_*`` families)."""
SUMMARY_PENDING_TTL_S = 900


def heartbeat_key(worker: str) -> str:
    return f"{HEARTBEAT_PREFIX}{worker}"


def deployment_ready_key(deployment: str) -> str:
    """The workers of ``deployment`` (``name@version``) that heartbeat ready."""
    return f"{READY_DEPLOYMENT_PREFIX}{deployment}:ready"


def deployment_queue(tier: str, deployment: str) -> str:
    """The Celery queue of ``tier``'s runs of ``deployment`` (``pro.SmolLM2-135M-Instruct@v1``): each worker
    consumes its own deployment's tier queues, in tier order."""
    return f"{tier}.{deployment}"


def engine_metrics_key(worker: str) -> str:
    return f"{ENGINE_METRICS_PREFIX}{worker}"


def run_lease_key(run_id: int) -> str:
    """Held (with a short TTL, refreshed with the heartbeat) by the worker generating the run."""
    return f"run:{run_id}:lease"


def cancel_key(run_id: int) -> str:
    """Set (with a TTL) when a streaming run is to be aborted; the worker checks it between engine steps."""
    return f"run:{run_id}:cancel"


def cancel_channel() -> str:
    """Pub/sub channel that carries run ids to abort, so workers react within one engine step."""
    return "runs:cancel"


def yield_channel() -> str:
    """Pub/sub channel that carries run ids to preempt: the worker generating one hands it off (it stops within an
    engine step, and the run goes back to its queue to continue from the text it streamed)."""
    return "runs:yield"


def request_yields(run_ids: list[int], *, client: redis.Redis) -> None:
    """Asks the workers to hand these runs off (the dispatcher's preemption); one round trip. A run that no worker
    is generating (not started yet, or ended meanwhile) ignores it."""
    if not run_ids:
        return
    pipe = client.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.publish(yield_channel(), run_id)
    pipe.execute()


def summary_pending_key(chat_id: int) -> str:
    """Set while a summary task of the chat is queued or running: one at a time per chat."""
    return f"chat:{chat_id}:summary-pending"


# -- sending work ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateMessage:
    """One ``generate(run_id)`` for :func:`send_generates`: its queue and vLLM's priority (None: the run's own)."""

    run_id: int
    queue: str
    engine_priority: int | None = None


def send_generates(messages: Sequence[GenerateMessage]) -> list[Exception | None]:
    """Publishes ``generate(run_id)`` on each message's queue (a tier queue, or one worker's own queue), through
    one producer and one Redis pipeline for them all (kombu's ``Producer.batch``: the task messages and their
    ``task-sent`` events go out in one round trip, not two a run). Returns, per message, None when it was
    published, or the error: one raised while it was prepared fails that message alone; a failed send fails every
    message prepared (their delivery is uncertain, so the caller queues them again, and a worker's lease and the
    run's status make a second copy a no-op)."""
    errors: list[Exception | None] = [None] * len(messages)
    if not messages:
        return errors
    app = current_app
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            for i, message in enumerate(messages):
                kwargs = {} if message.engine_priority is None else {"engine_priority": message.engine_priority}
                try:
                    app.send_task(
                        GENERATE_TASK,
                        args=[message.run_id],
                        kwargs=kwargs,
                        queue=message.queue,
                        producer=producer,
                        **_batched_send_options(message.queue, args=[message.run_id], kwargs=kwargs),
                    )
                    _declared_queues.add(message.queue)
                except Exception as exc:  # noqa: BLE001 - this message alone; the others still go
                    errors[i] = exc
    except Exception as exc:  # noqa: BLE001 - the send (or the connection) failed: nothing prepared is known sent
        return [error or exc for error in errors]
    return errors


_declared_queues: set[str] = set()
"""The queues this process has sent a ``generate`` to: declared to the broker by that first send."""


def _batched_send_options(queue: str, *, args: list[int], kwargs: dict[str, int]) -> dict[str, Any]:
    """What :func:`send_generates` tells Celery beyond the message, to skip work a batch does not need (measured: a
    third of the CPU of a send, ``bench/dispatcher_ceiling.py``):

    - ``declare=[]`` once the queue was declared by this process's first send to it. Celery declares it again on
      every send otherwise: kombu's ``maybe_declare`` finds it in its cache, but only after binding a copy of the
      queue and wrapping the call in a retry. (On Redis a task goes to the queue's list by name in any case.)
    - ``retry=False``: a batch only buffers the message, so there is nothing to retry; the one send of the batch is
      what fails, and the caller queues every message of it again.
    - ``argsrepr`` and ``kwargsrepr`` (what Flower shows), as Celery's ``saferepr`` writes them for a run id and a
      priority, without its pass over the arguments.
    """
    options: dict[str, Any] = {"retry": False, "argsrepr": repr(args), "kwargsrepr": repr(kwargs)}
    if queue in _declared_queues:
        options["declare"] = []
    return options


def send_summarize(*, chat_id: int, queue: str) -> None:
    """Publishes ``summarize(chat_id)`` on ``queue`` (the low-priority queue the workers drain last)."""
    current_app.send_task(SUMMARIZE_TASK, args=[chat_id], queue=queue)


def signal_cancel(*, run_id: int) -> None:
    """Tells whichever worker streams ``run_id`` to abort it: a flag with a TTL, then a pub/sub nudge."""
    pipe = get_redis().pipeline(transaction=False)
    pipe.set(cancel_key(run_id), "1", ex=settings.STREAMS.live_ttl_s)
    pipe.publish(cancel_channel(), str(run_id))
    pipe.execute()


# -- what the workers report -----------------------------------------------------------------------------


class WorkerState(StrEnum):
    READY = "ready"
    DRAINING = "draining"
    DRAINED = "drained"


@dataclass(frozen=True)
class WorkerHeartbeat:
    worker: str
    model: str
    model_version: str
    max_slots: int
    running: int
    waiting: int
    kv_cache_usage: float
    tpot_s: float | None
    """Recent time per output token in seconds; None when nothing decoded lately."""
    active_runs: int
    """Runs this worker's task threads are generating (from Celery's side, including queued in vLLM)."""
    updated_at: float
    """Unix time of the write."""
    prefix_cache_queries: int = 0
    """Prompt tokens the engine looked up in its prefix cache since it started (cumulative, like vLLM's counter)."""
    prefix_cache_hits: int = 0
    """Of those, tokens served from the prefix cache; the hit rate over a period is Δhits / Δqueries."""
    stats_at: float | None = None
    """Unix time the engine measured running/waiting (its last step; older than ``updated_at`` during a long
    step): the dispatcher counts runs sent after it as not yet visible in them."""
    deployment: str = ""
    """The ``name@version`` this worker serves (empty: a worker from before deployments were versioned)."""
    state: str = WorkerState.READY
    """:class:`WorkerState`: ``ready`` (takes runs), ``draining`` (its deployment drains; it finishes its runs) or
    ``drained`` (draining and idle: it can be stopped)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> WorkerHeartbeat:
        return cls(**json.loads(raw))

    def age_s(self, now: float | None = None) -> float:
        return (now if now is not None else time.time()) - self.updated_at


def write_heartbeat(beat: WorkerHeartbeat, *, ttl_s: int, client: redis.Redis | redis.client.Pipeline) -> None:
    """Stores ``beat`` for ``ttl_s`` seconds and lists its worker in ``workers:live`` until then (on a pipeline:
    queued with its other commands); drops the workers listed whose heartbeat has expired."""
    expires_at = beat.updated_at + ttl_s
    client.set(heartbeat_key(beat.worker), beat.to_json(), ex=ttl_s)
    client.zadd(LIVE_WORKERS_KEY, {beat.worker: expires_at})
    client.zremrangebyscore(LIVE_WORKERS_KEY, "-inf", f"({beat.updated_at}")
    if beat.deployment:
        ready = deployment_ready_key(beat.deployment)
        if beat.state == WorkerState.READY:
            client.zadd(ready, {beat.worker: expires_at})
        else:
            client.zrem(ready, beat.worker)
        client.zremrangebyscore(ready, "-inf", f"({beat.updated_at}")


def drop_heartbeat(worker: str, *, deployment: str = "", client: redis.Redis | None = None) -> None:
    """The worker stops advertising itself at once (its heartbeat and engine metrics go, and its listings)."""
    pipe = (client or get_redis()).pipeline(transaction=False)
    pipe.delete(heartbeat_key(worker), engine_metrics_key(worker))
    pipe.zrem(LIVE_WORKERS_KEY, worker)
    if deployment:
        pipe.zrem(deployment_ready_key(deployment), worker)
    pipe.execute()


def ready_worker_counts(deployments: list[str], *, client: redis.Redis | None = None) -> dict[str, int]:
    """How many workers of each deployment heartbeat ready now (one round trip)."""
    if not deployments:
        return {}
    pipe = (client or get_redis()).pipeline(transaction=False)
    now = time.time()
    for key in deployments:
        pipe.zcount(deployment_ready_key(key), now, "+inf")
    return {key: int(n) for key, n in zip(deployments, pipe.execute(), strict=True)}


def live_worker_names(*, client: redis.Redis | None = None) -> list[str]:
    """The workers whose heartbeat has not expired, by name (one round trip)."""
    names = (client or get_redis()).zrangebyscore(LIVE_WORKERS_KEY, time.time(), "+inf")
    return sorted(str(name) for name in names)


def worker_heartbeats(*, client: redis.Redis | None = None) -> list[WorkerHeartbeat]:
    """Every live worker's latest heartbeat (a heartbeat vanishes with its TTL when the worker dies)."""
    client = client or get_redis()
    names = live_worker_names(client=client)
    if not names:
        return []
    return [WorkerHeartbeat.from_json(str(raw)) for raw in client.mget([heartbeat_key(n) for n in names]) if raw]


def worker_heartbeats_of(workers: Iterable[str], *, client: redis.Redis | None = None) -> dict[str, WorkerHeartbeat]:
    """:func:`worker_heartbeat` of each of ``workers`` in one round trip (``MGET``); those with none are missing."""
    names = sorted(set(workers))
    if not names:
        return {}
    raws = (client or get_redis()).mget([heartbeat_key(name) for name in names])
    return {name: WorkerHeartbeat.from_json(str(raw)) for name, raw in zip(names, raws, strict=True) if raw is not None}


def worker_heartbeat(worker: str, *, client: redis.Redis | None = None) -> WorkerHeartbeat | None:
    """One worker's latest heartbeat; None when it has none (gone, or never started)."""
    raw = (client or get_redis()).get(heartbeat_key(worker))
    return WorkerHeartbeat.from_json(str(raw)) if raw is not None else None


def run_lease_holder(*, run_id: int, client: redis.Redis | None = None) -> str | None:
    """The lease value of the worker generating the run, or None when nobody holds it."""
    holder = (client or get_redis()).get(run_lease_key(run_id))
    return str(holder) if holder is not None else None


def run_lease_holders(run_ids: list[int], *, client: redis.Redis | None = None) -> dict[int, str | None]:
    """:func:`run_lease_holder` of many runs in one round trip (``MGET``)."""
    if not run_ids:
        return {}
    values = (client or get_redis()).mget([run_lease_key(run_id) for run_id in run_ids])
    return {run_id: (str(v) if v is not None else None) for run_id, v in zip(run_ids, values, strict=True)}


@dataclass(frozen=True)
class EngineMetricsSnapshot:
    """One worker's engine metrics as the web's ``/metrics`` merges them (with ``worker`` and ``deployment``
    labels added to every sample)."""

    worker: str
    deployment: str
    """The ``name@version`` the worker serves (the heartbeat's ``deployment``)."""
    published_at: float
    """Unix time the worker rendered ``text``."""
    text: str
    """The worker's ``vllm:*`` families in Prometheus' text exposition format."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> EngineMetricsSnapshot:
        return cls(**json.loads(raw))


def engine_metrics_ttl_s(config: WorkerConfig) -> int:
    """How long a snapshot outlives its writer: past the next publication (which comes within one publish
    interval plus one heartbeat interval), so a live worker never drops out between two, and gone this long after
    a worker dies, like its heartbeat."""
    return max(1, math.ceil(config.metrics_publish_s + config.heartbeat_ttl_s))


def publish_engine_metrics(snapshot: EngineMetricsSnapshot, *, ttl_s: int, client: redis.Redis | None = None) -> None:
    """Stores the worker's snapshot for ``ttl_s`` seconds (on a pipeline: queued with its other commands)."""
    (client or get_redis()).set(engine_metrics_key(snapshot.worker), snapshot.to_json(), ex=ttl_s)


def engine_metrics_snapshots(*, client: redis.Redis | None = None) -> list[EngineMetricsSnapshot]:
    """Every live worker's latest engine metrics, by worker name (an expired worker is absent)."""
    client = client or get_redis()
    keys = sorted(client.scan_iter(match=f"{ENGINE_METRICS_PREFIX}*", count=100))
    if not keys:
        return []
    return [EngineMetricsSnapshot.from_json(str(raw)) for raw in client.mget(keys) if raw]
