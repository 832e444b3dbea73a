"""Writes to runs: creation with its user message, cancel, and every transition of the run lifecycle.

A run ends in exactly one place, :func:`_end_run`: status and finish reason, the assistant message and the
counts when there are any, the day's usage and the refund of its reservation (``runs.quota``), and after
commit its terminal stream event (``done`` or ``error``, as :func:`runs.streaming.contract.run_terminal_event`
describes it), so a client following the stream learns of the end however it came about.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.limits import EffectiveLimits, user_limits
from accounts.models import User
from chats.context import message_fit_check
from chats.models import Chat, ChatOrigin, Message, MessageRole
from chats.summary_schedule import chat_summary_schedule_after_turn
from core.errors import ConflictError, DomainError
from deployments.models import DeploymentStatus
from deployments.selection import ModelNotFound, ModelUnavailable, Served, forget_cached, resolve_model
from deployments.tokenizer import using_model
from generation.result import EngineFinishReason, GenerationResult
from generation.sampling import SamplingError, SamplingSpec, check_sampling
from generation.worker_contract import cancel_key, ready_worker_counts, signal_cancel
from runs.lifecycle_log import RunStep, log_run_end, log_run_step, seconds_between
from runs.models import ACTIVE_STATUSES, FinishReason, PromptMode, Recovery, Run, RunStatus
from runs.prompt_insert import prompt_insert
from runs.queueing import run_enqueue
from runs.quota import quota_reserve, run_account_end
from runs.streaming.contract import RunStreamWriter, StreamedAnswer, run_terminal_event

logger = logging.getLogger(__name__)

_ENGINE_FINISH = {
    EngineFinishReason.STOP: FinishReason.STOP,
    EngineFinishReason.LENGTH: FinishReason.LENGTH,
    EngineFinishReason.ABORT: FinishReason.CANCELLED,
}


@dataclass(frozen=True)
class SamplingRequest:
    """What a prompt asks of the engine: ``max_tokens`` (None: the default, capped by the tier) and the rest of
    vLLM's sampling parameters (``generation.sampling``), stored on the run as asked."""

    max_tokens: int | None = None
    spec: SamplingSpec = field(default_factory=SamplingSpec)


def _resolve_max_tokens(*, limits: EffectiveLimits, requested: int | None) -> int:
    cap = limits.max_output_tokens
    if requested is None:
        return min(settings.CHAT_LIMITS.default_max_tokens, cap)
    if requested > cap:
        raise DomainError(f"max_tokens must be at most {cap} on the {limits.tier} tier.", code="max_tokens_too_large")
    return requested


def run_create(
    *,
    chat_id: int,
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
    keeps for its next runs (written by the same statement; None: the chat's stays).
    """
    sampling = sampling or SamplingRequest()
    served = deployment or resolve_model(None)  # 404/503 before anything is counted or written
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
        )


def _run_create(
    *,
    chat_id: int,
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
) -> Run:
    limits = user_limits(user=user)  # once per prompt: the cap, admission, then the scheduler's weight
    max_tokens = _resolve_max_tokens(limits=limits, requested=sampling.max_tokens)
    try:  # the API checked it already, naming its own parameters; this guards every other caller
        check_sampling(sampling.spec, max_tokens=max_tokens)
    except SamplingError as exc:
        raise DomainError(exc.message, code="invalid_sampling") from None
    tier = user.tier
    token_count = message_fit_check(
        content=content,
        context_limit_tokens=tier.context_limit_tokens,
        max_tokens=max_tokens,
        tier_name=tier.name,
        system_prompt=system_prompt,
    )
    # 429 before any write; the message was just tokenized for the fit check, so admission reuses that count.
    ticket = quota_reserve(user=user, limits=limits, input_tokens=max(1, token_count), max_tokens=max_tokens)
    message = Message(chat_id=chat_id, role=prompt_role, content=content, token_count=token_count)
    run = Run(
        chat_id=chat_id,
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
    )
    lines = content.strip().splitlines()
    try:
        written = prompt_insert(
            chat_id=chat_id,
            owner_id=user.pk,
            title=lines[0][:80] if lines else "",
            message=message,
            run=run,
            model=chat_model,
        )
        if written.busy:
            raise _run_in_progress()
        if written.run_id is None:
            raise Chat.DoesNotExist("No such chat, or it belongs to another user.")
        run.user_message = message
        ticket.bind_on_commit(run, then=lambda: run_enqueue(run=run, limits=limits))
    except IntegrityError as exc:
        if "one_active_run_per_chat" in str(exc):
            raise _run_in_progress() from exc
        raise
    finally:
        ticket.release_unless_bound()
    return run


def _run_in_progress() -> ConflictError:
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
            _end_run(locked, status=RunStatus.CANCELLED)  # leaves the scheduler queue, refunds on commit
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


def _end_run(
    run: Run,
    *,
    status: RunStatus,
    finish_reason: FinishReason | None = None,
    error: str = "",
    result: GenerationResult | None = None,
    message: Message | None = None,
) -> Run:
    """Ends ``run`` with ``status``: the one place a run becomes terminal.

    Call inside the transaction that holds the run's row lock (``SELECT ... FOR UPDATE``). Writes the status,
    the finish reason (``cancelled`` and ``error`` follow from the status), ``error``, the counts of
    ``result`` and the assistant ``message``; records usage now and, on commit, refunds the reservation,
    appends the terminal stream event and clears a pending cancel signal.
    """
    if not status.is_terminal:
        raise ValueError(f"{status} is not a terminal status")
    if finish_reason is None:
        finish_reason = {RunStatus.CANCELLED: FinishReason.CANCELLED, RunStatus.FAILED: FinishReason.ERROR}.get(
            status, FinishReason.STOP
        )
    run.status = status
    run.finish_reason = finish_reason
    run.finished_at = timezone.now()
    fields = ["status", "finish_reason", "finished_at"]
    if error:
        run.error = error
        fields.append("error")
    if result is not None:
        run.input_tokens = result.input_tokens
        run.output_tokens = result.output_tokens
        fields += ["input_tokens", "output_tokens"]
    if message is not None:
        run.assistant_message = message
        fields.append("assistant_message")
    run.save(update_fields=fields)
    run_account_end(run=run)
    transaction.on_commit(lambda: _announce_end(run))
    transaction.on_commit(lambda: log_run_end(run), robust=True)
    return run


def _announce_end(run: Run) -> None:
    """After commit: the terminal event on the run's stream (and the cancel flag gone). A Redis failure is
    logged, not raised: the end is in Postgres, and the SSE endpoint rebuilds the terminal event from it."""
    try:
        writer = RunStreamWriter(run.pk)
        event, data = run_terminal_event(run)
        writer.append(event, data)
        if run.status == RunStatus.CANCELLED:
            writer.client.delete(cancel_key(run.pk))
    except redis.RedisError:
        logger.exception("run %s ended but its terminal event could not be written", run.pk)


# Worker-side transitions. Each locks the run row (``SELECT ... FOR UPDATE``) because a cancel, the reaper
# and a redelivered copy of the same task can race the worker that owns the run.


def run_mark_streaming(*, run_id: int, worker: str, streamed: StreamedAnswer | None = None) -> tuple[Run, bool]:
    """Claims a run for one generation attempt; returns the run and whether this call changed it.

    Changed to ``streaming``: generate (``attempts`` counts this attempt). Changed to ``cancelled``: it was
    being cancelled when its previous worker died. Changed to ``failed``: it reached
    ``settings.WORKERS.max_attempts``. Unchanged: it was already terminal (a duplicate delivery).

    ``streamed``: what the run's stream shows of earlier attempts (None: it holds no event). The same write
    records how this attempt goes on from them (:func:`run_recovery_of`): ``Run.recovery`` and
    ``Run.resumed_tokens``, which the worker then follows (continue, or ``reset`` and start over).
    """
    with transaction.atomic():
        # What the worker reads next (the prompt: the chat, the user message, the tier's context budget; the
        # tier for the log lines), in the same round trip; only the run's row is locked.
        run = Run.objects.select_for_update(of=("self",)).select_related("tier", "chat", "user_message").get(pk=run_id)
        if run.is_terminal:
            return run, False
        if run.status == RunStatus.CANCELLING:
            return _end_run(run, status=RunStatus.CANCELLED), True
        if run.attempts >= settings.WORKERS.max_attempts:
            error = f"Generation was started {run.attempts} times and never finished; giving up."
            return _end_run(run, status=RunStatus.FAILED, error=error), True
        run.recovery, run.resumed_tokens = run_recovery_of(run, streamed)
        run.status = RunStatus.STREAMING
        run.attempts += 1
        run.worker = worker
        run.started_at = timezone.now()
        run.first_token_at = None
        run.save(
            update_fields=["status", "attempts", "worker", "started_at", "first_token_at", "recovery", "resumed_tokens"]
        )
        transaction.on_commit(
            lambda: log_run_step(
                RunStep.STARTED,
                run,
                f"run {run.pk} started on {worker} (attempt {run.attempts})",
                attempt=run.attempts,
                queue_wait_s=seconds_between(run.created_at, run.started_at),
                recovery=run.recovery,
                resumed_tokens=run.resumed_tokens,
            ),
            robust=True,
        )
        return run, True


def run_continuation_blocker(run: Run) -> str | None:
    """Why ``run`` cannot go on from an earlier attempt's text (None: it can).

    A constrained or structured-output run cannot: its logits processor or grammar would start again from the
    prompt's end and not know the text already emitted, so the continuation could leave the schema. Nor can a
    run with tools: the text may be a tool call the parser must see whole, from the assistant's first token.
    Nor any run while ``DEPLOYMENT_CONTINUE_RUNS`` is off (every recovery restarts, as before continuation).
    """
    if not settings.DEPLOYMENTS.continue_runs:
        return "continuation is turned off (DEPLOYMENT_CONTINUE_RUNS)"
    if run.tools:
        return "it has tools"
    try:
        spec = SamplingSpec.from_json(run.sampling or {}, temperature=run.temperature, top_p=run.top_p)
    except (TypeError, ValueError):  # the worker fails such a run when it builds its request
        return "its stored sampling cannot be read"
    if spec.constraint is not None:
        return "it is constrained"
    if spec.structured_outputs is not None:
        return "it asks for structured output"
    return None


def run_recovery_of(run: Run, streamed: StreamedAnswer | None) -> tuple[Recovery, int]:
    """How the next attempt of ``run`` (not yet counted in ``run.attempts``) goes on from the earlier ones, and
    the output tokens it continues from: ``continued`` from the answer its stream shows when there is one to go
    on from (some text, its start still in the stream) and the run allows it (:func:`run_continuation_blocker`);
    ``restarted`` when an earlier attempt was started, or its stream holds an answer, but it cannot continue; none
    for a first attempt (the ``queued`` status events the dispatcher writes while a run waits are no answer)."""
    earlier = run.attempts > 0 or (streamed is not None and bool(streamed.text or streamed.tokens))
    if not earlier:
        return Recovery.NONE, 0
    if streamed is not None and streamed.text and streamed.intact and run_continuation_blocker(run) is None:
        return Recovery.CONTINUED, streamed.tokens
    return Recovery.RESTARTED, 0


def run_mark_first_token(*, run_id: int, attempt: int) -> None:
    Run.objects.filter(pk=run_id, attempts=attempt, first_token_at__isnull=True).update(first_token_at=timezone.now())


def run_finish(*, run_id: int, attempt: int, result: GenerationResult) -> Run | None:
    """Ends the attempt's run with its result: the assistant message, the counts and the final status, in one
    transaction.

    Returns None when this attempt no longer owns the run (a later attempt took over, or it was failed).
    A run that was being cancelled (or whose request the engine aborted) ends ``cancelled`` and keeps the
    partial text as its assistant message, if there is any.
    """
    with transaction.atomic():
        # The chat is locked with the run (its row is written below); the tier, the user and their limits come
        # along for the settlement and the log line after commit, instead of three queries there.
        run = (
            Run.objects.select_for_update(of=("self", "chat"))
            .select_related("chat", "tier", "user__tier", "user__limit_override", "deployment")
            .get(pk=run_id)
        )
        if run.status not in (RunStatus.STREAMING, RunStatus.CANCELLING) or run.attempts != attempt:
            return None
        engine_finish = EngineFinishReason(result.finish_reason)
        cancelled = run.status == RunStatus.CANCELLING or engine_finish == EngineFinishReason.ABORT
        message = None
        if result.text or not cancelled:
            message = Message.objects.create(
                chat=run.chat, role=MessageRole.ASSISTANT, content=result.text, token_count=result.output_tokens
            )
        if cancelled:
            _end_run(run, status=RunStatus.CANCELLED, result=result, message=message)
        else:
            _end_run(
                run, status=RunStatus.DONE, finish_reason=_ENGINE_FINISH[engine_finish], result=result, message=message
            )
        Chat.objects.filter(pk=run.chat_id).update(updated_at=run.finished_at, last_worker=run.worker)
        chat_id = run.chat_id
        deployment = run.deployment.key if run.deployment is not None else ""
        if run.chat.origin == ChatOrigin.WEB:  # an OpenAI-compatible call's chat is never continued: no summary
            transaction.on_commit(lambda: chat_summary_schedule_after_turn(chat_id=chat_id, deployment=deployment))
        return run


def run_fail(*, run_id: int, error: str, attempt: int | None = None) -> Run | None:
    """Ends a run ``failed`` with ``error``; None if it is already terminal or ``attempt`` no longer owns it."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_terminal or (attempt is not None and run.attempts != attempt):
            return None
        return _end_run(run, status=RunStatus.FAILED, error=error)


def run_requeue_orphan(*, run_id: int, worker: str, attempt: int | None = None) -> Run | None:
    """Puts a run whose worker vanished back in the queue (or ends it ``cancelled`` if it was cancelling).

    ``worker`` (and ``attempt``) are the owner the reaper saw; if the run has moved on since (another attempt,
    even on a worker of the same name, or terminal), nothing changes and None is returned. A queued run is
    handed on again after commit, to another version of its model if its own no longer serves
    (:func:`_requeue`); its next attempt continues from what its stream shows.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("deployment").get(pk=run_id)
        if run.status not in (RunStatus.STREAMING, RunStatus.CANCELLING) or run.worker != worker:
            return None
        if attempt is not None and run.attempts != attempt:
            return None
        if run.status == RunStatus.CANCELLING:
            return _end_run(run, status=RunStatus.CANCELLED)
        return _requeue(run, worker=worker, reason="worker_lost", why=f"worker {worker} vanished")


def run_handoff(*, run_id: int, attempt: int, worker: str) -> Run | None:
    """Hands a run that ``worker``'s attempt ``attempt`` was generating back to the queue: its worker drains
    past its deadline, and another worker of the model continues the run from the text already streamed.

    Locks the run row (``SELECT ... FOR UPDATE``): a cancel, the reaper or a finish may race it. Only a run
    that this attempt still owns and that is ``streaming`` is requeued (and handed on after commit, moved to
    another version when its own drains: :func:`_requeue`); otherwise (cancelling, superseded, ended) nothing
    changes and None is returned, and the attempt ends the run as it would have. The caller should have
    released the run's lease first, so that the next worker's claim finds it free.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("deployment").get(pk=run_id)
        if run.status != RunStatus.STREAMING or run.attempts != attempt or run.worker != worker:
            return None
        return _requeue(run, worker=worker, reason="handoff", why=f"worker {worker} handed it off")


def _requeue(run: Run, *, worker: str, reason: str, why: str) -> Run:
    """Puts the locked ``run`` back to ``queued`` on a deployment that serves (:func:`_retarget`); logs a
    ``requeued`` event and enqueues it after commit. Call inside the transaction that holds its row lock, with
    ``run.deployment`` loaded."""
    moved_from = run.deployment.key if run.deployment is not None else ""
    moved_to = _retarget(run)
    run.status = RunStatus.QUEUED
    run.worker = ""
    run.save(update_fields=["status", "worker", "deployment"] if moved_to else ["status", "worker"])
    moved_to_key = moved_to.key if moved_to is not None else ""
    transaction.on_commit(
        lambda: log_run_step(
            RunStep.REQUEUED,
            run,
            f"run {run.pk}: {why}; queued again"
            + (f", moved from {moved_from} to {moved_to_key}" if moved_to_key else ""),
            worker=worker,
            level=logging.WARNING,
            reason=reason,
            attempt=run.attempts,
            moved_from=moved_from if moved_to_key else "",
            moved_to=moved_to_key,
        ),
        robust=True,
    )
    transaction.on_commit(lambda: run_enqueue(run=run))
    return run


def _retarget(run: Run) -> Served | None:
    """Moves ``run`` to a ready version of its model's name when its deployment no longer serves (draining,
    retired, failed, or no worker heartbeats ready); returns the new one (None: it stays).

    When no version of the name can take it (``ModelNotFound``/``ModelUnavailable``) it stays where it is and
    waits, for a worker of its deployment to come back or a version to become ready."""
    current = run.deployment
    if current is None:
        return None
    if current.status == DeploymentStatus.READY and ready_worker_counts([current.key]).get(current.key, 0) > 0:
        return None
    forget_cached()  # rare, and a stale snapshot could pick the very version that stopped serving
    try:
        served = resolve_model(current.name)
    except (ModelNotFound, ModelUnavailable) as exc:
        logger.warning("run %s: %s does not serve and no version of it can take the run (%s)", run.pk, current.key, exc)
        return None
    if served.id == current.pk:
        return None
    run.deployment_id = served.id
    return served
