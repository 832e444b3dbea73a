"""A chat's last answer again: regenerated (a new version answering the same prompt) or continued (a stopped answer
goes on). Each is a new run of the same user message; the answer it replaces (``Run.replaces``) stays, superseded
once the new run stores its own (``runs.lifecycle.run_finish``), and is listed as an earlier version.

The prompt is the chat before that user message (``chats.context``: superseded answers never in it), so the
replaced answer is not part of it; a continuation's prompt ends with the replaced answer's text as the start of
the answer (``inference_workers.prompting``), and its stored answer is that text followed by what it adds.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.limits import user_limits
from accounts.models import User
from chats.models import Chat, Message, MessageRole, Moderation
from core.errors import ConflictError
from deployments.selection import resolve_model
from generation.sampling import SamplingSpec
from runs.models import ACTIVE_STATUSES, FinishReason, PromptMode, Revision, Run, RunStatus
from runs.passes.pipeline import ROUTE_ONLY, prompt_passes
from runs.queueing import run_enqueue
from runs.quota import quota_reserve
from runs.services import prompt_facts, run_in_progress_error

CONTINUABLE = (FinishReason.LENGTH, FinishReason.CANCELLED)
TEMPLATE_MARGIN_TOKENS = 32
"""Room left for the chat template's tokens around a continued answer when its ``max_tokens`` is fitted."""


@dataclasses.dataclass(frozen=True)
class _Target:
    chat: Chat
    prompt: Message
    """The user message answered again."""
    answer: Message | None
    """The current answer to it (None: its last run wrote none)."""
    previous: Run | None
    """The run that wrote ``answer`` (else the prompt's last run)."""


def _target(*, chat_id: int, user: User) -> _Target:
    """The chat's last prompt and its current answer; 404 for another user's chat, 409 while a run is in flight."""
    chat = Chat.objects.filter(pk=chat_id, owner=user).first() if 0 < chat_id < 2**63 else None
    if chat is None:
        raise Chat.DoesNotExist("No such chat, or it belongs to another user.")
    if Run.objects.filter(chat=chat, status__in=ACTIVE_STATUSES).exists():
        raise run_in_progress_error()
    last = (
        Message.objects.filter(chat=chat, superseded=False, role__in=[MessageRole.USER, MessageRole.ASSISTANT])
        .order_by("-id")
        .first()
    )
    if last is None:
        raise ConflictError("This chat has no prompt to answer again.", code="nothing_to_revise")
    if last.moderation == Moderation.REFUSED:
        raise ConflictError(
            "The chat's last prompt was refused by moderation and is never answered: post another one.",
            code="prompt_refused",
        )
    if last.role == MessageRole.ASSISTANT:
        previous = Run.objects.select_related("user_message").filter(assistant_message=last).first()
        if previous is None:
            raise ConflictError("The chat's last answer has no run to answer again.", code="nothing_to_revise")
        return _Target(chat=chat, prompt=previous.user_message, answer=last, previous=previous)
    return _Target(chat=chat, prompt=last, answer=None, previous=last.runs.order_by("-id").first())


def run_regenerate(*, chat_id: int, user: User) -> Run:
    """A new run answering the chat's last prompt again (the current answer, if any, becomes an earlier version
    when it finishes). Its sampling is the previous run's without its seed (else the same answer would come
    back), and the chat's temperature setting when it has one."""
    target = _target(chat_id=chat_id, user=user)
    return _revise(target, user=user, revision=Revision.REGENERATE)


def run_continue(*, chat_id: int, user: User) -> Run:
    """A new run going on from the chat's last answer, which must have stopped short: cancelled, or cut at
    ``max_tokens`` (finish reason ``length``); 409 ``not_continuable`` otherwise."""
    target = _target(chat_id=chat_id, user=user)
    previous = target.previous
    if (
        target.answer is None
        or previous is None
        or previous.finish_reason not in CONTINUABLE
        or previous.prompt_mode != PromptMode.CHAT
        or previous.tools
        or "structured_outputs" in (previous.sampling or {})
    ):
        raise ConflictError(
            "The chat's last answer cannot be continued: only an answer that was stopped (cancelled) or cut at its "
            "max_tokens (finish_reason length), without tools or structured output, can go on. Regenerate it "
            "instead.",
            code="not_continuable",
        )
    return _revise(target, user=user, revision=Revision.CONTINUE)


def _revise(target: _Target, *, user: User, revision: Revision) -> Run:
    chat, previous = target.chat, target.previous
    served = resolve_model(chat.model)  # 404/503 before anything is counted or written
    limits = user_limits(user=user)
    tier = user.tier
    max_tokens = min(settings.CHAT_LIMITS.default_max_tokens, limits.max_output_tokens)
    input_tokens = target.prompt.token_count
    if revision == Revision.CONTINUE and target.answer is not None:
        input_tokens += target.answer.token_count
        window = min(tier.context_limit_tokens, settings.ENGINE.max_model_len)
        max_tokens = min(max_tokens, window - input_tokens - TEMPLATE_MARGIN_TOKENS)
        if max_tokens < 1:
            raise ConflictError(
                f"The answer is too long to continue: with its prompt it fills the {window}-token window.",
                code="not_continuable",
            )
    spec = (
        SamplingSpec.from_json(previous.sampling or {}, temperature=previous.temperature, top_p=previous.top_p)
        if previous is not None
        else SamplingSpec()
    )
    if revision == Revision.REGENERATE:
        spec = dataclasses.replace(spec, seed=None)
        if chat.temperature is not None:
            spec = dataclasses.replace(spec, temperature=chat.temperature)
    plan = prompt_passes(  # an `auto` chat is routed again; its prompt was moderated when it was posted
        prompt_facts(
            user=user,
            tier=tier,
            content=target.prompt.content,
            served=served,
            max_tokens=0,  # no client asked: the tier's default
            tools=previous.tools if previous is not None else None,
            spec=spec,
        ),
        ROUTE_ONLY,
    )
    served = plan.served
    ticket = quota_reserve(user=user, limits=limits, input_tokens=max(1, input_tokens), max_tokens=max_tokens)
    run = Run(
        chat=chat,
        user=user,
        tier=tier,
        user_message=target.prompt,
        status=RunStatus.QUEUED,
        priority=tier.priority,
        max_tokens=max_tokens,
        temperature=spec.temperature,
        top_p=spec.top_p,
        sampling=spec.to_json(),
        model=served.name,
        deployment_id=served.id,
        reserved_tokens=ticket.cost,
        revision=revision,
        replaces=target.answer,
        passes=plan.records_json(),
    )
    try:
        with transaction.atomic():
            # The chat's row lock, as run_create and chat_delete take it: a prompt posted meanwhile serializes.
            if not Chat.objects.select_for_update().filter(pk=chat.pk).update(updated_at=timezone.now()):
                raise Chat.DoesNotExist("No such chat, or it belongs to another user.")
            if Run.objects.filter(chat=chat, status__in=ACTIVE_STATUSES).exists():
                raise run_in_progress_error()
            run.save(force_insert=True)
            last_worker = chat.last_worker  # (read with the chat: a run that ended since moved it at most)
            ticket.bind_on_commit(run, then=lambda: run_enqueue(run=run, limits=limits, last_worker=last_worker))
    except IntegrityError as exc:
        if "one_active_run_per_chat" in str(exc):
            raise run_in_progress_error() from exc
        raise
    finally:
        ticket.release_unless_bound()
    return run
