"""The one place a committed, queued run is handed on, and a cancel signalled, towards the GPU workers."""

from __future__ import annotations

import logging

from runs.models import Run

logger = logging.getLogger(__name__)


def run_submit(*, run: Run) -> None:
    """Called after the transaction that created (or requeued) ``run`` commits: queue it for the dispatcher.

    The run waits in its user's scheduler queue (``runs.admission.run_enqueue``); the dispatcher
    (``python manage.py run_dispatcher``) sends it to its tier's Celery queue when the engines have room.
    """
    from runs.admission import run_enqueue

    run_enqueue(run=run)


def run_signal_cancel(*, run_id: int) -> None:
    """Called after a streaming run moved to ``cancelling`` commits: the worker aborts the request."""
    from inference_workers.dispatch import signal_cancel

    signal_cancel(run_id=run_id)
