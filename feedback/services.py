"""Writes of answers' feedback: a user rates the answer of one of their finished runs, or takes the rating back."""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from core.errors import ConflictError
from feedback.models import Rating, RunFeedback
from runs.models import Run, RunStatus


def feedback_set(*, run: Run, user: User, rating: Rating, reason: str = "") -> RunFeedback:
    """Rates ``run``'s answer (``run`` is ``user``'s: the caller checked, 404 otherwise), replacing an earlier
    rating. Only a finished run with an answer can be rated (409 ``not_rateable``). One statement's upsert on the
    run's one-to-one row, so two concurrent ratings leave one row, the last."""
    if not RunStatus(run.status).is_terminal or run.assistant_message_id is None:
        raise ConflictError(
            "Only a finished answer can be rated: wait for the run to end (a run that wrote no answer has none).",
            code="not_rateable",
        )
    with transaction.atomic():
        feedback, _ = RunFeedback.objects.update_or_create(
            run=run,
            defaults={"user": user, "deployment_id": run.deployment_id, "rating": rating, "reason": reason},
        )
    return feedback


def feedback_delete(*, run: Run) -> None:
    """Takes the rating of ``run`` back (idempotent)."""
    RunFeedback.objects.filter(run=run).delete()
