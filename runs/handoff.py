"""The one place a committed, queued run is handed on, and a cancel signalled, towards the GPU workers."""

from __future__ import annotations

import logging

from runs.models import Run

logger = logging.getLogger(__name__)


def run_submit(*, run: Run) -> None:
    """Called after the transaction that created (or requeued) ``run`` commits: enqueue it on its tier's queue."""
    from inference_workers.dispatch import send_to_worker

    send_to_worker(run_id=run.pk, queue=run.tier.name)


def run_signal_cancel(*, run_id: int) -> None:
    """Called after a streaming run moved to ``cancelling`` commits: the worker aborts the request."""
    from inference_workers.dispatch import signal_cancel

    signal_cancel(run_id=run_id)
