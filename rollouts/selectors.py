"""Reads about a version being drained."""

from __future__ import annotations

from collections import Counter

from deployments.models import ModelDeployment
from generation.worker_contract import worker_heartbeats
from runs.models import ACTIVE_STATUSES, Run


def deployment_drain_status(deployment: ModelDeployment) -> tuple[int, dict[str, int]]:
    """Its runs not ended yet, and its live workers by state (``ready``/``draining``/``drained``)."""
    active = Run.objects.filter(deployment=deployment, status__in=ACTIVE_STATUSES).count()
    states = Counter(beat.state for beat in worker_heartbeats() if beat.deployment == deployment.key)
    return active, dict(states)
