"""Reads of runs, always scoped to their owner."""

from __future__ import annotations

from django.shortcuts import get_object_or_404

from accounts.models import User
from chats.models import Chat
from runs.models import ACTIVE_STATUSES, Run


def run_get(*, user: User, run_id: int) -> Run:
    """The user's run, or 404: another user's run is indistinguishable from a missing one."""
    return get_object_or_404(Run.objects.select_related("assistant_message"), pk=run_id, user=user)


def run_active_for_chat(*, chat: Chat) -> Run | None:
    """The chat's unfinished run (at most one: see ``one_active_run_per_chat``), for clients that resume it."""
    return Run.objects.select_related("assistant_message").filter(chat=chat, status__in=ACTIVE_STATUSES).first()
