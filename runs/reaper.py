"""Repairs the dispatcher's leader runs every few seconds: runs whose worker died mid-stream, and queued runs
whose push into the scheduler's queue was lost."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from generation.worker_contract import run_lease_holders
from runs.lifecycle import run_fail, run_requeue_orphan
from runs.lifecycle_log import RunStep, log_run_step
from runs.models import Run, RunStatus
from runs.queueing import get_scheduler_store, run_enqueue
from scheduling.store import QueueMembership

logger = logging.getLogger(__name__)


def reap_orphaned_runs() -> list[int]:
    """Requeues (or fails, after ``max_attempts``) streaming runs whose worker no longer holds their lease; a
    requeued run moves to a version of its model that serves if its own no longer does, and its next attempt
    continues from the text already streamed (``runs.lifecycle.run_requeue_orphan``).

    A worker refreshes the lease of every run it generates with its heartbeat, so the lease vanishes
    ``heartbeat_ttl_s`` after the worker dies. Runs younger than ``orphan_grace_s`` are left alone.
    Callable from the dispatcher loop or ``manage.py reap_orphaned_runs``. Returns the run ids handled.
    """
    cfg = settings.WORKERS
    cutoff = timezone.now() - timedelta(seconds=cfg.orphan_grace_s)
    handled: list[int] = []
    candidates = list(
        Run.objects.filter(status__in=[RunStatus.STREAMING, RunStatus.CANCELLING], started_at__lt=cutoff).values_list(
            "id", "worker", "attempts"
        )
    )
    holders = run_lease_holders([run_id for run_id, _, _ in candidates])  # one round trip, however many
    for run_id, worker, attempts in candidates:
        if holders[run_id] is not None:
            continue
        if not cfg.requeue_orphans or attempts >= cfg.max_attempts:
            error = f"Worker {worker or '?'} stopped while generating this answer (attempt {attempts})."
            failed = run_fail(run_id=run_id, error=error, attempt=attempts)
            if failed is not None:
                handled.append(run_id)
            continue
        # The attempt the reaper saw: a new one that started since (a redelivery) is left alone.
        requeued = run_requeue_orphan(run_id=run_id, worker=worker, attempt=attempts)  # logs ``requeued``
        if requeued is not None:
            if requeued.status != RunStatus.QUEUED:
                logger.warning("run %s: worker %s vanished while it was being cancelled", run_id, worker)
            handled.append(run_id)
    return handled


def requeue_lost_runs(*, older_than_s: float = 30.0, limit: int = 500) -> list[int]:
    """Queued runs that are neither in the scheduler queue nor in flight go back in the queue.

    Their push was lost: Redis was unreachable when the run committed, Redis lost its data, or the run's
    in-flight entry expired (``SCHED_IN_FLIGHT_TTL_S``) without the run ever starting (a lost Celery message).
    """
    store: QueueMembership = get_scheduler_store()
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    lost = []
    runs = Run.objects.filter(status=RunStatus.QUEUED, created_at__lt=cutoff).select_related(
        "user", "tier", "user_message"
    )
    for run in runs.order_by("created_at")[:limit]:
        if not store.is_queued_or_in_flight(run.pk, run.tier.name):
            log_run_step(
                RunStep.REQUEUED,
                run,
                f"run {run.pk} was queued in Postgres but not in the scheduler: queueing it again",
                level=logging.WARNING,
                reason="lost_from_queue",
            )
            run_enqueue(run=run)
            lost.append(run.pk)
    return lost
