"""The one place a committed, queued run is handed to the scheduler."""

from __future__ import annotations

import logging

from runs.models import Run

logger = logging.getLogger(__name__)


def run_submit(*, run: Run) -> None:
    """Called after the transaction that created ``run`` commits."""
    logger.info("run %s queued for tier %s", run.pk, run.tier_id)
