"""Writes to runs: creation with its user message, and the cancel transitions."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.limits import EffectiveLimits, user_limits
from accounts.models import User
from chatproject.exceptions import ConflictError, DomainError
from chats.models import Chat, Message, MessageRole
from runs.admission import admission_reserve, run_account_end
from runs.handoff import run_signal_cancel, run_submit
from runs.models import ACTIVE_STATUSES, FinishReason, Run, RunStatus


@dataclass(frozen=True)
class SamplingRequest:
    max_tokens: int | None = None
    temperature: float = 0.7
    top_p: float = 1.0


def _resolve_max_tokens(*, limits: EffectiveLimits, requested: int | None) -> int:
    cap = limits.max_output_tokens
    if requested is None:
        return min(settings.CHAT_LIMITS.default_max_tokens, cap)
    if requested > cap:
        raise DomainError(f"max_tokens must be at most {cap} on the {limits.tier} tier.", code="max_tokens_too_large")
    return requested


def run_create(
    *,
    chat: Chat,
    user: User,
    content: str,
    sampling: SamplingRequest | None = None,
    system_prompt: str | None = None,
) -> Run:
    """Stores the user's message and a queued run in one transaction; hands the run on after commit.

    Holds a ``SELECT ... FOR UPDATE`` lock on the chat so two concurrent posts to one chat serialize;
    the partial unique index ``one_active_run_per_chat`` is the last line of defence. ``system_prompt`` is
    the chat's own system message, if it has one (the fit check then counts it instead of the default).
    """
    sampling = sampling or SamplingRequest()
    limits = user_limits(user=user)  # once per prompt: the cap, then admission
    max_tokens = _resolve_max_tokens(limits=limits, requested=sampling.max_tokens)
    from chats.context import message_fit_check  # the serving model's tokenizer: loaded on first use

    token_count = message_fit_check(
        content=content,
        context_limit_tokens=user.tier.context_limit_tokens,
        max_tokens=max_tokens,
        tier_name=user.tier.name,
        system_prompt=system_prompt,
    )
    # 429 before any write; the message was just tokenized for the fit check, so admission reuses that count.
    ticket = admission_reserve(user=user, limits=limits, input_tokens=max(1, token_count), max_tokens=max_tokens)
    try:
        with transaction.atomic():
            locked_chat = Chat.objects.select_for_update().get(pk=chat.pk)
            if Run.objects.filter(chat=locked_chat, status__in=ACTIVE_STATUSES).exists():
                raise ConflictError(
                    "This chat already has an answer in progress: wait for it or cancel it first.",
                    code="run_in_progress",
                )
            message = Message.objects.create(
                chat=locked_chat, role=MessageRole.USER, content=content, token_count=token_count
            )
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
                reserved_tokens=ticket.cost,
            )
            ticket.bind_on_commit(run, then=lambda: run_submit(run=run))
    except IntegrityError as exc:
        if "one_active_run_per_chat" in str(exc):
            raise ConflictError(
                "This chat already has an answer in progress: wait for it or cancel it first.",
                code="run_in_progress",
            ) from exc
        raise
    finally:
        ticket.release_unless_bound()
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
            run_account_end(run=locked)  # leaves the scheduler queue and refunds its reservation on commit
        elif locked.status == RunStatus.STREAMING:
            locked.status = RunStatus.CANCELLING
            locked.save(update_fields=["status"])
            run_id = locked.pk
            transaction.on_commit(lambda: run_signal_cancel(run_id=run_id))
    return locked


def run_cancel_all_for_chat(*, chat: Chat) -> None:
    for run in Run.objects.filter(chat=chat, status__in=ACTIVE_STATUSES):
        run_cancel(run=run)


# Worker-side transitions. Each locks the run row (``SELECT ... FOR UPDATE``) because a cancel, the reaper
# and a redelivered copy of the same task can race the worker that owns the run.


def run_mark_streaming(*, run_id: int, worker: str) -> tuple[Run, bool]:
    """Claims a run for one generation attempt; returns the run and whether this call changed it.

    Changed to ``streaming``: generate (``attempts`` counts this attempt). Changed to ``cancelled``: it was
    being cancelled when its previous worker died. Changed to ``failed``: it reached
    ``settings.WORKERS.max_attempts``. Unchanged: it was already terminal (a duplicate delivery).
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        now = timezone.now()
        if run.is_terminal:
            return run, False
        if run.status == RunStatus.CANCELLING:
            run.status = RunStatus.CANCELLED
            run.finish_reason = FinishReason.CANCELLED
            run.finished_at = now
            run.save(update_fields=["status", "finish_reason", "finished_at"])
            run_account_end(run=run)
            return run, True
        if run.attempts >= settings.WORKERS.max_attempts:
            run.status = RunStatus.FAILED
            run.finish_reason = FinishReason.ERROR
            run.error = f"Generation was started {run.attempts} times and never finished; giving up."
            run.finished_at = now
            run.save(update_fields=["status", "finish_reason", "error", "finished_at"])
            run_account_end(run=run)
            return run, True
        run.status = RunStatus.STREAMING
        run.attempts += 1
        run.worker = worker
        run.started_at = now
        run.first_token_at = None
        run.save(update_fields=["status", "attempts", "worker", "started_at", "first_token_at"])
        return run, True


def run_mark_first_token(*, run_id: int, attempt: int) -> None:
    Run.objects.filter(pk=run_id, attempts=attempt, first_token_at__isnull=True).update(first_token_at=timezone.now())


@dataclass(frozen=True)
class GenerationResult:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    """The engine's reason: ``stop``, ``length`` or ``abort``."""


def run_finish(*, run_id: int, attempt: int, result: GenerationResult) -> Run | None:
    """Writes the assistant message, the counts and the final status in one transaction.

    Returns None when this attempt no longer owns the run (a later attempt took over, or it was failed).
    A run that was being cancelled (or whose request the engine aborted) ends ``cancelled`` and keeps the
    partial text as its assistant message, if there is any.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("chat").get(pk=run_id)
        if run.status not in (RunStatus.STREAMING, RunStatus.CANCELLING) or run.attempts != attempt:
            return None
        now = timezone.now()
        cancelled = run.status == RunStatus.CANCELLING or result.finish_reason == "abort"
        if cancelled:
            run.status = RunStatus.CANCELLED
            run.finish_reason = FinishReason.CANCELLED
        else:
            run.status = RunStatus.DONE
            run.finish_reason = FinishReason.LENGTH if result.finish_reason == "length" else FinishReason.STOP
        if result.text or not cancelled:
            run.assistant_message = Message.objects.create(
                chat=run.chat, role=MessageRole.ASSISTANT, content=result.text, token_count=result.output_tokens
            )
        run.input_tokens = result.input_tokens
        run.output_tokens = result.output_tokens
        run.finished_at = now
        run.save(
            update_fields=[
                "status",
                "finish_reason",
                "assistant_message",
                "input_tokens",
                "output_tokens",
                "finished_at",
            ]
        )
        run_account_end(run=run)
        Chat.objects.filter(pk=run.chat_id).update(updated_at=now, last_worker=run.worker)
        from chats.tasks import chat_summary_schedule_after_turn  # the rolling summary, when it is due

        chat_id = run.chat_id
        transaction.on_commit(lambda: chat_summary_schedule_after_turn(chat_id=chat_id))
        return run


def run_fail(*, run_id: int, error: str, attempt: int | None = None) -> Run | None:
    """Ends a run ``failed`` with ``error``; None if it is already terminal or ``attempt`` no longer owns it."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_terminal or (attempt is not None and run.attempts != attempt):
            return None
        run.status = RunStatus.FAILED
        run.finish_reason = FinishReason.ERROR
        run.error = error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finish_reason", "error", "finished_at"])
        run_account_end(run=run)
        return run


def run_requeue_orphan(*, run_id: int, worker: str) -> Run | None:
    """Puts a run whose worker vanished back in the queue (or ends it ``cancelled`` if it was cancelling).

    ``worker`` is the owner the reaper saw; if the run has moved on since (another attempt, or terminal),
    nothing changes and None is returned. A queued run is handed on again after commit.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status not in (RunStatus.STREAMING, RunStatus.CANCELLING) or run.worker != worker:
            return None
        if run.status == RunStatus.CANCELLING:
            run.status = RunStatus.CANCELLED
            run.finish_reason = FinishReason.CANCELLED
            run.finished_at = timezone.now()
            run.save(update_fields=["status", "finish_reason", "finished_at"])
            run_account_end(run=run)
            return run
        run.status = RunStatus.QUEUED
        run.worker = ""
        run.save(update_fields=["status", "worker"])
        transaction.on_commit(lambda: run_submit(run=run))
        return run
