"""Reads of runs, always scoped to their owner."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db.models import Q
from django.shortcuts import get_object_or_404

from accounts.models import User
from chats.models import Chat, Message, MessageRole
from runs.models import ACTIVE_STATUSES, Run, RunStatus
from runs.queueing import get_scheduler_store
from scheduling.store import Position, QueuePositions


def run_get(*, user: User, run_id: int) -> Run:
    """The user's run, or 404: another user's run is indistinguishable from a missing one."""
    # ``feedback``: the reverse one-to-one of ``feedback.RunFeedback`` (the app a layer up adds it to Run; nothing
    # of it is imported here), read in the same query.
    return get_object_or_404(Run.objects.select_related("assistant_message", "feedback"), pk=run_id, user=user)


def run_active_for_chat(*, chat: Chat) -> Run | None:
    """The chat's unfinished run (at most one: see ``one_active_run_per_chat``), for clients that resume it."""
    return Run.objects.select_related("assistant_message").filter(chat=chat, status__in=ACTIVE_STATUSES).first()


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


@dataclass
class Answers:
    """What the message list shows with a page of messages (from :func:`message_answers`): for each assistant
    message, the run that wrote it (its ``feedback`` loaded), and the earlier versions of its answer."""

    run_of: dict[int, Run] = field(default_factory=dict)
    """Assistant message id → the run that wrote it."""
    versions_of: dict[int, list[Run]] = field(default_factory=dict)
    """Current assistant message id → the runs whose (superseded) answers it replaced, oldest first."""


def message_answers(*, messages: Sequence[Message]) -> Answers:
    """The runs behind a page of messages, in one query whatever the page's size: those that wrote its assistant
    messages, and every other run answering the same prompts (the earlier versions, regenerated or continued)."""
    ids = [m.pk for m in messages if m.role == MessageRole.ASSISTANT]
    answers = Answers()
    if not ids:
        return answers
    prompts = Run.objects.filter(assistant_message_id__in=ids).values("user_message_id")
    runs = list(
        Run.objects.filter(Q(user_message_id__in=prompts), assistant_message__isnull=False)
        .select_related("assistant_message", "feedback")
        .order_by("id")
    )
    by_prompt: dict[int, list[Run]] = {}
    for run in runs:
        by_prompt.setdefault(run.user_message_id, []).append(run)
        if run.assistant_message_id in ids:
            answers.run_of[run.assistant_message_id] = run
    for message_id, run in answers.run_of.items():
        answers.versions_of[message_id] = [
            r for r in by_prompt[run.user_message_id] if r.assistant_message_id != message_id and _superseded(r)
        ]
    return answers


def _superseded(run: Run) -> bool:
    return run.assistant_message is not None and run.assistant_message.superseded
