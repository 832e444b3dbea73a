"""Celery tasks of the GPU workers (thin: the work is in :mod:`inference_workers.services`)."""

from __future__ import annotations

import logging

from celery import shared_task

from inference_workers.dispatch import GENERATE_TASK
from inference_workers.runtime import get_runtime
from inference_workers.services import generate_run
from runs.models import Run

logger = logging.getLogger(__name__)


@shared_task(name=GENERATE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def generate(run_id: int) -> str | None:
    """Generates run ``run_id`` on this worker's engine (idempotent for redeliveries)."""
    try:
        status = generate_run(run_id=run_id, runtime=get_runtime())
    except Run.DoesNotExist:
        logger.warning("run %s does not exist (deleted with its chat?); dropping the task", run_id)
        return None
    return status.value if status is not None else None
