"""Writes to runs: creation with its user message, and the cancel transitions."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import User
from chatproject.exceptions import ConflictError, DomainError
from chats.models import Chat, Message, MessageRole
from runs.handoff import run_submit
from runs.models import ACTIVE_STATUSES, FinishReason, Run, RunStatus


@dataclass(frozen=True)
class SamplingRequest:
    max_tokens: int | None = None
    temperature: float = 0.7
    top_p: float = 1.0


def _resolve_max_tokens(*, user: User, requested: int | None) -> int:
    cap = user.tier.max_output_tokens
    if requested is None:
        return min(settings.CHAT_LIMITS.default_max_tokens, cap)
    if requested > cap:
        raise DomainError(
            f"max_tokens must be at most {cap} on the {user.tier.name} tier.", code="max_tokens_too_large"
        )
    return requested


def run_create(*, chat: Chat, user: User, content: str, sampling: SamplingRequest | None = None) -> Run:
    """Stores the user's message and a queued run in one transaction; hands the run on after commit.

    Holds a ``SELECT ... FOR UPDATE`` lock on the chat so two concurrent posts to one chat serialize;
    the partial unique index ``one_active_run_per_chat`` is the last line of defence.
    """
    sampling = sampling or SamplingRequest()
    max_tokens = _resolve_max_tokens(user=user, requested=sampling.max_tokens)
    try:
        with transaction.atomic():
            locked_chat = Chat.objects.select_for_update().get(pk=chat.pk)
            if Run.objects.filter(chat=locked_chat, status__in=ACTIVE_STATUSES).exists():
                raise ConflictError(
                    "This chat already has an answer in progress: wait for it or cancel it first.",
                    code="run_in_progress",
                )
            message = Message.objects.create(chat=locked_chat, role=MessageRole.USER, content=content)
            now = timezone.now()
            update_fields = ["updated_at"]
            locked_chat.updated_at = now
            if not locked_chat.title:
                locked_chat.title = content.strip().splitlines()[0][:80]
                update_fields.append("title")
            locked_chat.save(update_fields=update_fields)
            run = Run.objects.create(
                chat=locked_chat,
                user=user,
                tier=user.tier,
                user_message=message,
                status=RunStatus.QUEUED,
                priority=user.tier.priority,
                max_tokens=max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                model=settings.ENGINE.served_model_name,
            )
            transaction.on_commit(lambda: run_submit(run=run))
    except IntegrityError as exc:
        if "one_active_run_per_chat" in str(exc):
            raise ConflictError(
                "This chat already has an answer in progress: wait for it or cancel it first.",
                code="run_in_progress",
            ) from exc
        raise
    return run


def run_cancel(*, run: Run) -> Run:
    """Cancels a run; idempotent.

    Locks the run row (``SELECT ... FOR UPDATE``) because a cancel can race the worker finishing it:
    whichever commits first wins and the other sees a terminal or ``cancelling`` status.
    A queued run ends ``cancelled`` at once; a streaming one goes to ``cancelling`` and the worker ends it.
    """
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status == RunStatus.QUEUED:
            locked.status = RunStatus.CANCELLED
            locked.finish_reason = FinishReason.CANCELLED
            locked.finished_at = timezone.now()
            locked.save(update_fields=["status", "finish_reason", "finished_at"])
        elif locked.status == RunStatus.STREAMING:
            locked.status = RunStatus.CANCELLING
            locked.save(update_fields=["status"])
    return locked


def run_cancel_all_for_chat(*, chat: Chat) -> None:
    for run in Run.objects.filter(chat=chat, status__in=ACTIVE_STATUSES):
        run_cancel(run=run)
