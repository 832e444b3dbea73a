"""A run's lifecycle as log records, one per step, so one prompt can be followed across processes.

(These are log records only: the events a client reads from a run's SSE stream are
``runs.streaming.contract.StreamEvent``.)

The web process logs ``admitted``, ``refused`` (no run is created) and ``queued``; the dispatcher
``dispatched`` and ``requeued`` (its reaper); the worker ``started``, ``first_token`` and the end, logged
where every run ends (``runs.lifecycle.run_end``): ``finished`` (done), ``cancelled`` or ``failed``.
Each record goes to the ``runs.events`` logger with the ``extra`` fields ``event`` (the :class:`RunStep`),
``run_id``, ``user_id``, ``tier``, ``deployment`` (the served model's name), ``worker`` (empty until a worker holds
the run) and the step's own fields; ``core.logs`` writes them as JSON keys (``LOG_FORMAT=json``) or as ``key=value``.
Callers log after the transaction that made the step commits, so a logged step happened.
"""

from __future__ import annotations

import logging
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from runs.models import Run, RunStatus

logger = logging.getLogger("runs.events")  # not __name__: the name is part of the log format that queries filter on


class RunStep(StrEnum):
    """A step of a run's lifecycle: the ``event`` field of its log record."""

    ADMITTED = "admitted"
    REFUSED = "refused"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    STARTED = "started"
    FIRST_TOKEN = "first_token"  # noqa: S105 - a step name, not a credential
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"
    REQUEUED = "requeued"


_END_STEPS = {RunStatus.DONE: RunStep.FINISHED, RunStatus.CANCELLED: RunStep.CANCELLED}


def log_step(
    step: RunStep,
    message: str,
    *,
    run_id: int | None,
    user_id: int | None,
    tier: str,
    deployment: str = "",
    worker: str = "",
    level: int = logging.INFO,
    **fields: object,
) -> None:
    """Logs ``step`` with the lifecycle fields given one by one (for a prompt that has no run, or a run
    that is not loaded); ``fields`` are the step's own."""
    extra = {
        "event": str(step),
        "run_id": run_id,
        "user_id": user_id,
        "tier": tier,
        "deployment": deployment or settings.ENGINE.served_model_name,
        "worker": worker,
        **fields,
    }
    logger.log(level, message, extra=extra)


def log_run_step(
    step: RunStep,
    run: Run,
    message: str = "",
    *,
    worker: str | None = None,
    level: int = logging.INFO,
    **fields: object,
) -> None:
    """Logs ``step`` of ``run`` with its lifecycle fields and the step's own ``fields``; ``worker`` names the
    worker concerned when it is not (or no longer) the run's own."""
    log_step(
        step,
        message or f"run {run.pk} {step}",
        run_id=run.pk,
        user_id=run.user_id,
        tier=_tier_name(run),
        deployment=run.model,
        worker=run.worker if worker is None else worker,
        level=level,
        **fields,
    )


def log_run_end(run: Run) -> None:
    """The end of ``run`` (called on commit by ``runs.lifecycle.run_end``, whoever ended it)."""
    status = RunStatus(run.status)
    step = _END_STEPS.get(status, RunStep.FAILED)
    fields: dict[str, Any] = {
        "status": str(status),
        "finish_reason": run.finish_reason,
        "attempt": run.attempts,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "duration_s": seconds_between(run.created_at, run.finished_at),
    }
    if status == RunStatus.FAILED:
        fields["error"] = run.error
    message = f"run {run.pk} {step}: {status} ({run.finish_reason}), {run.output_tokens} tokens"
    if run.error:
        message += f": {run.error}"
    level = logging.WARNING if status == RunStatus.FAILED else logging.INFO
    log_run_step(step, run, message, level=level, **fields)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """``end - start`` in seconds (to the millisecond); None when either is unknown."""
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def _tier_name(run: Run) -> str:
    """The run's tier name: loaded with the run, or one query (a log line never fails its caller)."""
    try:
        return run.tier.name
    except DatabaseError:
        return ""
