"""Reads of runs, always scoped to their owner."""

from __future__ import annotations

from django.shortcuts import get_object_or_404

from accounts.models import User
from runs.models import Run


def run_get(*, user: User, run_id: int) -> Run:
    """The user's run, or 404: another user's run is indistinguishable from a missing one."""
    return get_object_or_404(Run.objects.select_related("assistant_message"), pk=run_id, user=user)
