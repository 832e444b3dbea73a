"""Writes to runs from the API: a run's creation with its user message, its cancel, and deleting a chat with its runs.

Every transition after creation (the worker claiming the run, its first token, its end, a requeue or a hand-off)
is in :mod:`runs.lifecycle`, and a run ends in exactly one place, :func:`runs.lifecycle.run_end`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import cast

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.limits import EffectiveLimits, user_limits
from accounts.models import Tier, User
from chats.context import message_fit_check
from chats.models import Chat, Message, MessageRole, Moderation
from chats.services import title_from_text
from core.errors import ConflictError, DomainError
from deployments.selection import Served, resolve_model
from deployments.tokenizer import count_tokens, using_model
from generation.sampling import SamplingError, SamplingSpec, check_sampling
from generation.worker_contract import signal_cancel
from runs.lifecycle import run_answer_from_cache, run_end
from runs.models import ACTIVE_STATUSES, PromptMode, Run, RunStatus
from runs.passes import PromptFacts, PromptPlan, PromptRefused
from runs.passes.cache import (
    UNKNOWN,
    Conversation,
    ConversationReader,
    cache_after_create,
    chat_conversation_reader,
    fixed_conversation,
)
from runs.passes.memory import memory_after_create
from runs.passes.moderate_input import refusal_record
from runs.passes.pipeline import prompt_passes
from runs.prompt_insert import prompt_insert, prompt_insert_new_chat
from runs.queueing import run_enqueue
from runs.quota import quota_reserve

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingRequest:
    """What a prompt asks of the engine: ``max_tokens`` (None: the default, capped by the tier) and the rest of
    vLLM's sampling parameters (``generation.sampling``), stored on the run as asked."""

    max_tokens: int | None = None
    spec: SamplingSpec = field(default_factory=SamplingSpec)
    temperature_from_chat: bool = False
    """The prompt named no temperature: the chat's setting (``Chat.temperature``) applies when it has one."""


@dataclass(frozen=True)
class ChatTemperature:
    """The chat's temperature setting, when the caller read it with the chat (None: the chat has none)."""

    value: float | None
    exists: bool = True
    """False: the caller found no such chat of the user's (the 404 follows)."""


def _resolve_max_tokens(*, limits: EffectiveLimits, requested: int | None) -> int:
    cap = limits.max_output_tokens
    if requested is None:
        return min(settings.CHAT_LIMITS.default_max_tokens, cap)
    if requested > cap:
        raise DomainError(f"max_tokens must be at most {cap} on the {limits.tier} tier.", code="max_tokens_too_large")
    return requested


def run_create(
    *,
    chat_id: int | None,
    user: User,
    content: str,
    sampling: SamplingRequest | None = None,
    system_prompt: str | None = None,
    prompt_mode: PromptMode = PromptMode.CHAT,
    tools: list[dict[str, object]] | None = None,
    end_user: str = "",
    prompt_role: MessageRole = MessageRole.USER,
    deployment: Served | None = None,
    chat_model: str | None = None,
    service_tier: Tier | None = None,
    metadata: dict[str, str] | None = None,
    store: bool = True,
    prompt_cache_key: str = "",
    plan: PromptPlan | None = None,
    chat_temperature: ChatTemperature | None = None,
    new_chat: Chat | None = None,
) -> Run:
    """Stores the user's message and a queued run in the user's chat ``chat_id``; hands the run on after commit.

    Raises ``Chat.DoesNotExist`` (404) when the chat is missing or another user's, ``ConflictError`` (409)
    when it has an unfinished run. The checks that need no database (the tier's caps, the fit check,
    admission: 429) come first, so a refused prompt costs no database work; then one statement checks the
    chat, takes its row lock (so two concurrent posts to one chat serialize), bumps its ``updated_at`` and
    title and writes both rows (``runs.prompt_insert``): no transaction of its own, none half-written.
    The partial unique index ``one_active_run_per_chat`` is the last line of defence. ``user`` should have
    its tier and limit override loaded (``accounts.authentication`` does), else they are read here.
    ``system_prompt`` is the chat's own system message, if it has one (the fit check then counts it instead
    of the default). ``prompt_mode``, ``tools`` and ``end_user`` are stored on the run as given (the
    OpenAI-compatible API's); ``prompt_role`` is the new message's role (``tool`` when an API call hands back a
    tool's result). ``deployment``: the one the caller resolved from the request's ``model``
    (``deployments.selection.resolve_model``; None: the default model, resolved here); its tokenizer counts the
    prompt, and the run is queued for its workers. ``chat_model``: the ``model`` the prompt named, which the chat
    keeps for its next runs (written by the same statement; None: the chat's stays). ``service_tier``: the tier the
    run is queued and scheduled on (its queue, priority and prompt budget; None: the user's), admission and the caps
    staying the user's. ``metadata``, ``store`` and ``prompt_cache_key`` are stored on the run as given.
    ``chat_temperature``: the chat's temperature setting when the caller read the chat already (the cache's key
    then needs no read of its own when the prompt cannot be cached).

    The passes before the queue (``runs.passes``: input moderation, routing, the cache) run first, unless the
    caller ran them already for this prompt (``plan``: an API call with several choices runs them once). A prompt
    they refuse is kept in the chat as a refused message (when this call ran them) and answered with
    :class:`~runs.passes.PromptRefused`: nothing is queued or charged.

    ``new_chat`` (``chat_id`` None): an unsaved chat of its own for the prompt (an OpenAI-compatible call's), written
    by the same statement as the prompt (``runs.prompt_insert.prompt_insert_new_chat``); the caller ran the passes
    (``plan``).
    """
    if (chat_id is None) == (new_chat is None):
        raise ValueError("run_create takes a chat_id or a new_chat")
    sampling = sampling or SamplingRequest()
    served = deployment or resolve_model(None)  # 404/503 before anything is counted or written
    if plan is None:
        if chat_id is None:
            raise ValueError("a new chat's prompt comes with the plan of its passes")
        tier = service_tier or user.tier
        try:
            plan = prompt_passes(
                prompt_facts(
                    user=user,
                    tier=tier,
                    content=content,
                    served=served,
                    max_tokens=sampling.max_tokens or 0,
                    tools=tools,
                    spec=sampling.spec,
                    conversation=chat_conversation_reader(
                        chat_id=chat_id,
                        user=user,
                        temperature=chat_temperature.value if chat_temperature else UNKNOWN,
                        exists=chat_temperature.exists if chat_temperature else True,
                    ),
                    temperature_from_chat=sampling.temperature_from_chat,
                    chat_id=chat_id,
                )
            )
        except PromptRefused as refused:
            kept = prompt_refuse(
                chat_id=chat_id, user=user, tier=tier, content=content, role=prompt_role, refused=refused
            )
            if kept is None:  # another user's chat reads as a missing one, flagged or not
                raise Chat.DoesNotExist("No such chat, or it belongs to another user.") from None
            raise
    served = plan.served
    with using_model(served.local_path):
        return _run_create(
            chat_id=chat_id,
            user=user,
            content=content,
            sampling=sampling,
            system_prompt=system_prompt,
            prompt_mode=prompt_mode,
            tools=tools,
            end_user=end_user,
            prompt_role=prompt_role,
            served=served,
            chat_model=chat_model,
            service_tier=service_tier,
            metadata=metadata or {},
            store=store,
            prompt_cache_key=prompt_cache_key,
            plan=plan,
            new_chat=new_chat,
        )


def prompt_facts(
    *,
    user: User,
    tier: Tier,
    content: str,
    served: Served,
    max_tokens: int,
    tools: list[dict[str, object]] | None,
    spec: SamplingSpec,
    history_tokens: int = 0,
    conversation: ConversationReader | None = None,
    temperature_from_chat: bool = False,
    n: int = 1,
    chat_id: int | None = None,
) -> PromptFacts:
    """What the passes before the queue see of a prompt (its tokens counted with ``served``'s tokenizer)."""

    def tokens(text: str) -> int:
        with using_model(served.local_path):
            return count_tokens(text)

    return PromptFacts(
        user=user,
        tier=tier,
        content=content,
        served=served,
        max_tokens=max_tokens,
        has_tools=bool(tools),
        structured=spec.structured_outputs is not None or spec.constraint is not None,
        count_tokens=tokens,
        history_tokens=history_tokens,
        spec=spec,
        temperature_from_chat=temperature_from_chat,
        n=n,
        tools=tools,
        conversation=conversation,
        chat_id=chat_id,
    )


def prompt_plan(
    *,
    user: User,
    tier: Tier,
    content: str,
    served: Served,
    max_tokens: int | None,
    tools: list[dict[str, object]] | None = None,
    spec: SamplingSpec | None = None,
    history_tokens: int = 0,
    conversation: Conversation | None = None,
    n: int = 1,
) -> PromptPlan:
    """The passes before the queue for a prompt whose chat the caller writes itself in a transaction of its own (an
    API call: once for all its choices), to hand to :func:`run_create` as ``plan``. A refusal is recorded as a
    violation without a message (the call's chat is never written: its transaction does not begin) and raised."""
    try:
        return prompt_passes(
            prompt_facts(
                user=user,
                tier=tier,
                content=content,
                served=served,
                max_tokens=max_tokens or 0,
                tools=tools,
                spec=spec or SamplingSpec(),
                history_tokens=history_tokens,
                conversation=fixed_conversation(conversation) if conversation is not None else None,
                n=n,
            )
        )
    except PromptRefused as refused:
        refusal_record(user=user, tier=tier, refused=refused, message_id=None)
        raise


def prompt_refuse(
    *, chat_id: int, user: User, tier: Tier, content: str, role: MessageRole, refused: PromptRefused
) -> Message | None:
    """Keeps a refused prompt in the user's chat ``chat_id`` as a refused message (never answered, never in a
    prompt) with its violation record, and names it in the refusal (``message_id``); None when the chat is not the
    user's (the caller answers 404: only the violation is recorded, nothing is written into the chat)."""
    with transaction.atomic():
        chat = Chat.objects.select_for_update().filter(pk=chat_id, owner=user).first() if 0 < chat_id < 2**63 else None
        if chat is None:
            refusal_record(user=user, tier=tier, refused=refused, message_id=None)
            return None
        message = Message.objects.create(
            chat=chat, role=role, content=content, token_count=0, moderation=Moderation.REFUSED
        )
        Chat.objects.filter(pk=chat.pk).update(updated_at=timezone.now(), title=chat.title or title_from_text(content))
        refusal_record(user=user, tier=tier, refused=refused, message_id=message.pk)
    refused.extra["message_id"] = message.pk
    return message


def _run_create(
    *,
    chat_id: int | None,
    user: User,
    content: str,
    sampling: SamplingRequest,
    system_prompt: str | None,
    prompt_mode: PromptMode,
    tools: list[dict[str, object]] | None,
    end_user: str,
    prompt_role: MessageRole,
    served: Served,
    chat_model: str | None,
    service_tier: Tier | None,
    metadata: dict[str, str],
    store: bool,
    prompt_cache_key: str,
    plan: PromptPlan,
    new_chat: Chat | None,
) -> Run:
    limits = user_limits(user=user)  # once per prompt: the cap, admission, then the scheduler's weight
    max_tokens = _resolve_max_tokens(limits=limits, requested=sampling.max_tokens)
    try:  # the API checked it already, naming its own parameters; this guards every other caller
        check_sampling(sampling.spec, max_tokens=max_tokens)
    except SamplingError as exc:
        raise DomainError(exc.message, code="invalid_sampling") from None
    tier = service_tier or user.tier
    token_count = message_fit_check(
        content=content,
        context_limit_tokens=tier.context_limit_tokens,
        max_tokens=max_tokens,
        tier_name=tier.name,
        system_prompt=system_prompt,
    )
    # 429 before any write; the message was just tokenized for the fit check, so admission reuses that count.
    ticket = quota_reserve(user=user, limits=limits, input_tokens=max(1, token_count), max_tokens=max_tokens)
    message = Message(role=prompt_role, content=content, token_count=token_count)  # (its chat: below)
    run = Run(
        user=user,
        tier=tier,
        status=RunStatus.QUEUED,
        priority=tier.priority,
        max_tokens=max_tokens,
        temperature=sampling.spec.temperature,
        top_p=sampling.spec.top_p,
        sampling=sampling.spec.to_json(),
        tools=tools or [],
        prompt_mode=prompt_mode,
        end_user=end_user,
        model=served.name,
        deployment_id=served.id,
        reserved_tokens=ticket.cost,
        metadata=metadata,
        store=store,
        prompt_cache_key=prompt_cache_key,
        passes=plan.records_json(),
    )
    try:
        if new_chat is not None:
            written = prompt_insert_new_chat(chat=new_chat, message=message, run=run)
        else:
            message.chat_id = run.chat_id = cast(int, chat_id)  # (run_create: a chat_id when no new_chat)
            written = prompt_insert(
                chat_id=run.chat_id,
                owner_id=user.pk,
                title=title_from_text(content),
                message=message,
                run=run,
                model=chat_model,
                temperature_from_chat=sampling.temperature_from_chat,
            )
        if written.busy:
            raise run_in_progress_error()
        if written.run_id is None:
            raise Chat.DoesNotExist("No such chat, or it belongs to another user.")
        run.user_message = message
        memory_after_create(run=run, plan=plan)  # the prompt is kept as a memory, when memory is on for the user
        hit = plan.cache.lookup.hit if plan.cache is not None else None
        if hit is not None:  # answered from the cache: never queued, its stream written at once
            answer = hit.answer
            ticket.bind_on_commit(run, then=lambda: _answer_from_cache(run_id=run.pk, answer=answer))
        else:
            last_worker = written.last_worker
            ticket.bind_on_commit(
                run, hand_on=lambda pipe: _enqueue(pipe, run=run, limits=limits, plan=plan, last_worker=last_worker)
            )
    except IntegrityError as exc:
        if "one_active_run_per_chat" in str(exc):
            raise run_in_progress_error() from exc
        raise
    finally:
        ticket.release_unless_bound()
    return run


def _answer_from_cache(*, run_id: int, answer: str) -> None:
    run_answer_from_cache(run_id=run_id, answer=answer)


def _enqueue(
    pipe: redis.client.Pipeline, *, run: Run, limits: EffectiveLimits, plan: PromptPlan, last_worker: str
) -> None:
    cache_after_create(run=run, plan=plan)  # a miss's embedding waits for the run's end
    run_enqueue(run=run, limits=limits, last_worker=last_worker, pipe=pipe)  # sent with the admission's bind


def run_in_progress_error() -> ConflictError:
    """The 409 for a second run of a chat while one is unfinished (a prompt, a regenerate, a continue)."""
    return ConflictError(
        "This chat already has an answer in progress: wait for it or cancel it first.", code="run_in_progress"
    )


def run_cancel(*, run: Run) -> Run:
    """Cancels a run; idempotent.

    Locks the run row (``SELECT ... FOR UPDATE``) because a cancel can race the worker finishing it:
    whichever commits first wins and the other sees a terminal or ``cancelling`` status.
    A queued run ends ``cancelled`` at once; a streaming one goes to ``cancelling`` and the worker ends it.
    """
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status == RunStatus.QUEUED:
            run_end(locked, status=RunStatus.CANCELLED)  # leaves the scheduler queue, refunds on commit
        elif locked.status == RunStatus.STREAMING:
            locked.status = RunStatus.CANCELLING
            locked.save(update_fields=["status"])
            run_id = locked.pk
            transaction.on_commit(lambda: signal_cancel(run_id=run_id))
    return locked


@transaction.atomic
def chat_delete(*, chat: Chat) -> None:
    """Deletes the chat and everything in it. Active runs are cancelled first so workers stop generating.

    Lives with the runs (a layer above ``chats``) because it must end them: refunds, queue exit, the
    worker's abort. Locks the chat row (``SELECT ... FOR UPDATE``) like ``run_create`` does, so a prompt
    posted at the same moment either lands before (and its run is cancelled here) or finds the chat gone.
    """
    Chat.objects.select_for_update().filter(pk=chat.pk).first()
    for run in Run.objects.filter(chat=chat, status__in=ACTIVE_STATUSES):
        run_cancel(run=run)
    chat.delete()
