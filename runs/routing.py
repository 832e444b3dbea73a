"""Where a dispatched run goes: chat affinity on the web side of the worker contract.

Each GPU worker consumes its own queue (``worker.<name>``) besides the tier queues. A run goes to the worker
that served its chat's previous turn (``chat.last_worker``, written when a run finishes) while that worker
is alive and has room (:func:`scheduling.affinity.choose_route`), so its prefix cache still holds the
chat's prompt; otherwise to the shared tier queue, where any worker takes it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings

from core.db_executor import reconnect_after_db_error
from generation.worker_contract import deployment_queue, send_generate, worker_heartbeat
from runs.lifecycle_log import RunStep, log_run_step, log_step
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
            deployment=beat.deployment,
        )
    ]


def _run_for_dispatch(run_id: int) -> Run | None:
    """What routing and the ``dispatched`` line need of the run: its ids, tier, model and chat's last worker
    (one query). None if the run is gone."""
    return (
        Run.objects.select_related("tier", "chat")
        .only("id", "user", "model", "worker", "tier__name", "chat__last_worker")
        .filter(pk=run_id)
        .first()
    )


def route_run(*, run: Run | None, tier_queue: str, deployment: str = "") -> Route:
    """Where ``generate(run)`` goes: the chat's previous worker's own queue (when it serves the run's deployment),
    or the tier queue of the run's deployment."""
    if not settings.CONTEXT.chat_affinity:
        return Route(queue=tier_queue, worker=None, reason="disabled")
    previous = run.chat.last_worker if run is not None else ""
    workers = [w for w in previous_worker_load(previous) if not deployment or w.deployment == deployment]
    return choose_route(
        previous_worker=previous,
        tier_queue=tier_queue,
        workers=workers,
        now=time.time(),
        stale_after_s=float(settings.WORKERS.heartbeat_ttl_s),
    )


def route_run_or_tier_queue(*, run_id: int, tier_queue: str, deployment: str = "") -> tuple[Route, Run | None]:
    """The :func:`route_run` of the run (and the run); the tier queue if a lookup fails (routing never blocks
    a run)."""
    run = None
    try:
        with reconnect_after_db_error():  # Postgres restarted: the next lookup connects again
            run = _run_for_dispatch(run_id)
        return route_run(run=run, tier_queue=tier_queue, deployment=deployment), run
    except Exception:  # a Redis or database hiccup: any worker will do
        logger.exception("run %s: chat affinity lookup failed; using the tier queue", run_id)
        return Route(queue=tier_queue, worker=None, reason="affinity_lookup_failed"), run


def send_to_worker(*, run_id: int, queue: str, engine_priority: int | None = None, deployment: str = "") -> None:
    """Publishes ``generate(run_id)`` for the tier ``queue``: on the chat's previous worker's queue when
    affinity applies (and that worker serves ``deployment``), else on the deployment's tier queue
    (``pro.name@version``; the plain tier queue for a run without one); the workers drain their tier queues in
    order. ``engine_priority``: vLLM's priority the dispatcher chose (None: the run's tier priority)."""
    if queue not in settings.CELERY_TASK_QUEUES_ORDER:
        raise ValueError(f"unknown worker queue {queue!r}")
    tier_queue = deployment_queue(queue, deployment) if deployment else queue
    route, run = route_run_or_tier_queue(run_id=run_id, tier_queue=tier_queue, deployment=deployment)
    send_generate(run_id=run_id, queue=route.queue, engine_priority=engine_priority)
    message = f"run {run_id} sent to queue {route.queue} ({route.reason})"
    fields: dict[str, Any] = {"queue": route.queue, "route": route.reason, "engine_priority": engine_priority}
    if run is None:  # gone, or its lookup failed: the line still says where it went
        log_step(RunStep.DISPATCHED, message, run_id=run_id, user_id=None, tier=queue, **fields)
    else:
        log_run_step(RunStep.DISPATCHED, run, message, worker=route.worker or "", **fields)
