"""Reads of answers' feedback: counts per deployment version and per day (admin, ``/metrics``, rollouts)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count, Q
from django.db.models.functions import TruncDate

from feedback.models import Rating, RunFeedback


@dataclass(frozen=True)
class FeedbackTally:
    """Ratings of one deployment version (or one day of it)."""

    up: int
    down: int

    @property
    def ratings(self) -> int:
        return self.up + self.down

    @property
    def negative_rate(self) -> float | None:
        """Share of ``down`` ratings (None: no ratings)."""
        return self.down / self.ratings if self.ratings else None


UP = Count("id", filter=Q(rating=Rating.UP))
DOWN = Count("id", filter=Q(rating=Rating.DOWN))


def feedback_of_runs_since(*, deployment_ids: list[int], since: dt.datetime) -> dict[int, FeedbackTally]:
    """Each version's ratings of its runs created since ``since`` (a rollout step's traffic), in one query; a
    version without any is absent."""
    rows = (
        RunFeedback.objects.filter(deployment_id__in=deployment_ids, run__created_at__gte=since)
        .values("deployment_id")
        .annotate(up=UP, down=DOWN)
        .order_by("deployment_id")
    )
    return {row["deployment_id"]: FeedbackTally(up=row["up"], down=row["down"]) for row in rows}


def feedback_by_deployment() -> dict[int | None, FeedbackTally]:
    """Every version's ratings (None: runs whose deployment row is gone), one query."""
    rows = RunFeedback.objects.values("deployment_id").annotate(up=UP, down=DOWN).order_by("deployment_id")
    return {row["deployment_id"]: FeedbackTally(up=row["up"], down=row["down"]) for row in rows}


def feedback_by_day(*, days: int = 14) -> list[tuple[dt.date, int | None, FeedbackTally]]:
    """Ratings per day (of their last change, UTC) and version, newest day first, over the last ``days`` days."""
    since = dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=days)
    rows = (
        RunFeedback.objects.filter(updated_at__gte=since)
        .annotate(day=TruncDate("updated_at"))
        .values("day", "deployment_id")
        .annotate(up=UP, down=DOWN)
        .order_by("-day", "deployment_id")
    )
    return [(row["day"], row["deployment_id"], FeedbackTally(up=row["up"], down=row["down"])) for row in rows]
