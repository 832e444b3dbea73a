"""Where a dispatched run goes: chat affinity on the web side of the worker contract.

Each GPU worker consumes its own queue (``worker.<name>``) besides the tier queues. A run goes to the worker
that served its chat's previous turn (``chat.last_worker``, written when a run finishes) while that worker
is alive and has room (:func:`scheduling.affinity.choose_route`), so its prefix cache still holds the
chat's prompt; otherwise to the shared tier queue, where any worker takes it.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from core.worker_contract import send_generate, worker_heartbeat
from runs.models import Run
from scheduling.affinity import Route, WorkerLoad, choose_route

logger = logging.getLogger(__name__)


def previous_worker_load(worker: str) -> list[WorkerLoad]:
    beat = worker_heartbeat(worker) if worker else None
    if beat is None:
        return []
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


def send_to_worker(*, run_id: int, queue: str) -> None:
    """Publishes ``generate(run_id)`` for the tier ``queue``: on the chat's previous worker's queue when
    affinity applies, else on the tier queue (the workers drain the tier queues in order)."""
    if queue not in settings.CELERY_TASK_QUEUES_ORDER:
        raise ValueError(f"unknown worker queue {queue!r}")
    target, reason = route_run_or_tier_queue(run_id=run_id, tier_queue=queue)
    send_generate(run_id=run_id, queue=target)
    logger.info("run %s sent to queue %s (%s)", run_id, target, reason)
