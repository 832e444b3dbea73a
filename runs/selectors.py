"""Reads of runs, always scoped to their owner."""

from __future__ import annotations

from collections.abc import Iterable

from django.shortcuts import get_object_or_404

from accounts.models import User
from chats.models import Chat
from runs.models import ACTIVE_STATUSES, Run, RunStatus
from runs.queueing import get_scheduler_store
from scheduling.store import Position, QueuePositions


def run_get(*, user: User, run_id: int) -> Run:
    """The user's run, or 404: another user's run is indistinguishable from a missing one."""
    return get_object_or_404(Run.objects.select_related("assistant_message"), pk=run_id, user=user)


def run_active_for_chat(*, chat: Chat) -> Run | None:
    """The chat's unfinished run (at most one: see ``one_active_run_per_chat``), for clients that resume it."""
    return Run.objects.select_related("assistant_message").filter(chat=chat, status__in=ACTIVE_STATUSES).first()


def prompt_cache_key_worker(*, user: User, prompt_cache_key: str) -> str:
    """The worker that took the user's latest run with ``prompt_cache_key`` ("" when none did): the one whose prefix
    cache most likely holds that prompt (OpenAI's ``prompt_cache_key``; the index ``run_user_cache_key``)."""
    if not prompt_cache_key:
        return ""
    worker = (
        Run.objects.filter(user=user, prompt_cache_key=prompt_cache_key)
        .exclude(worker="")
        .order_by("-id")
        .values_list("worker", flat=True)
        .first()
    )
    return worker or ""


def run_queue_positions(*, runs: Iterable[Run | None]) -> dict[int, Position]:
    """The queued runs' positions (1 = next) and estimated waits, as the dispatcher last computed them.

    One Redis read for the whole response (none when no run is queued); runs not queued, or not yet placed
    by the dispatcher, are absent.
    """
    queued = [run.pk for run in runs if run is not None and run.status == RunStatus.QUEUED]
    if not queued:
        return {}
    store: QueuePositions = get_scheduler_store()
    return store.positions(queued)
