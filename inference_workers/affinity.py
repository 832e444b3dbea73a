"""Chat affinity on the worker side: each worker consumes its own queue, and runs are routed to it.

A worker consumes ``worker.<its name>`` besides the tier queues (added when it starts), and
:func:`route_run` sends a run to the worker that served its chat's previous turn
(``chat.last_worker``, written when a run finishes) while that worker is alive and has room
(:func:`scheduling.affinity.choose_route`); otherwise to the shared tier queue.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.signals import celeryd_after_setup
from django.conf import settings

from chatproject.redis_client import get_redis
from inference_workers.heartbeats import WorkerHeartbeat, heartbeat_key
from scheduling.affinity import Route, WorkerLoad, choose_route, worker_queue

logger = logging.getLogger(__name__)


def previous_worker_load(worker: str) -> list[WorkerLoad]:
    if not worker:
        return []
    raw = get_redis().get(heartbeat_key(worker))
    if raw is None:
        return []
    beat = WorkerHeartbeat.from_json(str(raw))
    return [
        WorkerLoad(
            name=beat.worker,
            slots=beat.max_slots,
            running=beat.running,
            waiting=beat.waiting,
            updated_at=beat.updated_at,
        )
    ]


def route_run(*, run_id: int, tier_queue: str) -> Route:
    """Where ``generate(run_id)`` goes: the chat's previous worker's own queue, or the tier queue."""
    if not settings.CONTEXT.chat_affinity:
        return Route(queue=tier_queue, worker=None, reason="disabled")
    from runs.models import Run

    previous = Run.objects.filter(pk=run_id).values_list("chat__last_worker", flat=True).first() or ""
    return choose_route(
        previous_worker=previous,
        tier_queue=tier_queue,
        workers=previous_worker_load(previous),
        now=time.time(),
        stale_after_s=float(settings.WORKERS.heartbeat_ttl_s),
    )


def route_run_or_tier_queue(*, run_id: int, tier_queue: str) -> tuple[str, str]:
    """``(queue, reason)`` of :func:`route_run`; the tier queue if the lookup fails (routing never blocks a run)."""
    try:
        route = route_run(run_id=run_id, tier_queue=tier_queue)
    except Exception:  # a Redis or database hiccup: any worker will do
        logger.exception("run %s: chat affinity lookup failed; using the tier queue", run_id)
        return tier_queue, "affinity_lookup_failed"
    return route.queue, route.reason


@celeryd_after_setup.connect(dispatch_uid="inference_workers.consume_own_queue")
def consume_own_queue(sender: str, instance: Any, **kwargs: Any) -> None:
    """A GPU worker (one consuming the tier queues) also consumes the queue of runs pinned to it."""
    queues = instance.app.amqp.queues
    consumed = set(queues.consume_from or queues)
    if not consumed & set(settings.CELERY_TASK_QUEUES_ORDER):
        return
    queues.select_add(worker_queue(sender))
    logger.info("worker %s also consumes %s (chat affinity)", sender, worker_queue(sender))
