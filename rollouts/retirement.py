"""Retiring the versions nobody uses any more (``manage.py retire_deployments``, run on a schedule)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from answer_cache.services import cache_forget_deployments
from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus
from deployments.selection import forget_cached
from runs.models import ACTIVE_STATUSES, Run


def retire_idle_deployments(*, idle_s: float | None = None, now: datetime | None = None) -> list[ModelDeployment]:
    """Retires (status ``retired``, ``retired_at``, weight 0) the versions that are ``draining``, or ``ready`` with
    weight 0, that have no run in flight and have been idle for ``idle_s`` (``DEPLOYMENT_RETIRE_IDLE_S``): no run
    created, and not made ready or put to draining, within it (a version kept back for a quick return stays that
    long after its drain began). Never a name's newest version still in service (by ``created_at``), never the
    default, never a running rollout's source or target. Returns those retired."""
    idle_s = settings.DEPLOYMENTS.retire_idle_s if idle_s is None else idle_s
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=idle_s)
    retired: list[ModelDeployment] = []
    with transaction.atomic():
        rows = list(
            ModelDeployment.objects.select_for_update()
            .exclude(status__in=[DeploymentStatus.RETIRED, DeploymentStatus.FAILED])
            .order_by("id")
        )
        last_run_at = dict(
            Run.objects.filter(deployment__in=rows)
            .values("deployment_id")
            .annotate(last=Max("created_at"))
            .values_list("deployment_id", "last")
        )
        newest: dict[str, ModelDeployment] = {}
        for row in rows:
            if row.name not in newest or (row.created_at, row.pk) > (newest[row.name].created_at, newest[row.name].pk):
                newest[row.name] = row
        in_rollouts = set(
            Rollout.objects.filter(status=RolloutStatus.RUNNING).values_list("from_deployment_id", "to_deployment_id")
        )
        protected = {pk for pair in in_rollouts for pk in pair if pk is not None}
        busy = set(
            Run.objects.filter(deployment__in=rows, status__in=ACTIVE_STATUSES).values_list("deployment_id", flat=True)
        )
        for row in rows:
            idle_since = max(t for t in (last_run_at.get(row.pk), row.ready_at, row.drained_at, row.created_at) if t)
            retirable = row.status == DeploymentStatus.DRAINING or (
                row.status == DeploymentStatus.READY and row.traffic_weight == 0
            )
            if (
                not retirable
                or row.is_default
                or newest[row.name].pk == row.pk
                or row.pk in protected
                or row.pk in busy
                or idle_since > cutoff
            ):
                continue
            row.status = DeploymentStatus.RETIRED
            row.retired_at = now
            row.traffic_weight = 0
            row.status_reason = f"Retired: idle since {idle_since.isoformat(timespec='seconds')}."
            row.save(update_fields=["status", "retired_at", "traffic_weight", "status_reason", "updated_at"])
            retired.append(row)
    if retired:
        forget_cached()
        # A retired version's cached answers go with it (the lookup's row check already refuses them).
        cache_forget_deployments(deployment_ids=[row.pk for row in retired])
    return retired
