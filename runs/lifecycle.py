"""The transitions of a run's lifecycle after its creation: the worker's claim, first token, finish and failure, a
requeue of an orphan and a hand-off to another worker, and the one place a run ends.

A run ends in exactly one place, :func:`run_end`: status and finish reason, the assistant message and the
counts when there are any, the day's usage and the refund of its reservation (``runs.quota``), and after
commit its terminal stream event (``done`` or ``error``, as :func:`runs.streaming.contract.run_terminal_event`
describes it), so a client following the stream learns of the end however it came about.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.limits import usage_record_sql
from chats.models import Chat, ChatOrigin, Message, MessageRole, Moderation
from chats.summary_schedule import chat_summary_schedule_after_turn
from core.compiled_get import CompiledGet
from deployments.models import DeploymentStatus
from deployments.selection import (
    ModelNotFound,
    ModelUnavailable,
    Served,
    deployment_by_id,
    forget_cached,
    resolve_model,
)
from generation.result import EngineFinishReason, GenerationResult
from generation.sampling import SamplingSpec
from generation.worker_contract import cancel_key, ready_worker_counts
from runs.lifecycle_log import RunStep, log_run_end, log_run_step, seconds_between
from runs.models import FinishReason, Recovery, Revision, Run, RunStatus
from runs.passes.cache import cache_after_finish
from runs.queueing import run_enqueue
from runs.quota import run_account_end
from runs.streaming.contract import (
    RunStreamWriter,
    StreamedAnswer,
    StreamEvent,
    run_terminal_event,
    terminal_append_in,
)

logger = logging.getLogger(__name__)

_ENGINE_FINISH = {
    EngineFinishReason.STOP: FinishReason.STOP,
    EngineFinishReason.LENGTH: FinishReason.LENGTH,
    EngineFinishReason.ABORT: FinishReason.CANCELLED,
    EngineFinishReason.CONTENT_FILTER: FinishReason.CONTENT_FILTER,
}


def run_end(
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
        if result.passes:
            run.passes = [*run.passes, *result.passes]
            fields.append("passes")
    if message is not None:
        run.assistant_message = message
        fields.append("assistant_message")
    run.save(update_fields=fields)
    _after_end(run)
    return run


def _after_end(run: Run, *, usage_recorded: bool = False) -> None:
    """What follows the write that ended ``run``, in its transaction: the usage (unless that write recorded it), then
    on commit the refund, the terminal stream event and the log record."""
    run_account_end(run=run, usage_recorded=usage_recorded, announce=functools.partial(_announce_end_in, run))
    transaction.on_commit(lambda: log_run_end(run), robust=True)


def _announce_end_in(run: Run, pipe: redis.client.Pipeline) -> None:
    """After commit, in the settlement's round trip (``runs.quota.run_account_end``, which logs a failure): the
    terminal event on the run's stream, and the cancel flag gone. The SSE endpoint rebuilds the terminal event
    from Postgres when the stream lacks it."""
    event, data = run_terminal_event(run)
    terminal_append_in(pipe, run.pk, event, data)
    if run.status == RunStatus.CANCELLED:
        pipe.delete(cancel_key(run.pk))


# Worker-side transitions. Each locks the run row (``SELECT ... FOR UPDATE``) because a cancel, the reaper
# and a redelivered copy of the same task can race the worker that owns the run.


_CLAIM_RELATED = ("tier", "chat", "user_message", "user__tier", "user__limit_override")
"""What a claim reads with the run: what the worker reads next (the prompt: the chat, the user message, the tier's
context budget; the tier for the log lines), and what the end's settlement uses (the user, their tier and limits),
which :func:`run_finish` then need not read again."""

_claim_read = CompiledGet(lambda: Run.objects.select_related(*_CLAIM_RELATED))
"""A first claim's read: compiled once per connection (six relations joined cost Django 0.7 ms of CPU to compile at
every run; :mod:`core.compiled_get`)."""


def run_mark_streaming(*, run_id: int, worker: str, streamed: StreamedAnswer | None = None) -> tuple[Run, bool]:
    """Claims a run for one generation attempt; returns the run and whether this call changed it.

    Changed to ``streaming``: generate (``attempts`` counts this attempt). Changed to ``cancelled``: it was
    being cancelled when its previous worker died. Changed to ``failed``: it reached
    ``settings.WORKERS.max_attempts``. Unchanged: it was already terminal (a duplicate delivery).

    ``streamed``: what the run's stream shows of earlier attempts (None: it holds no event). The same write
    records how this attempt goes on from them (:func:`run_recovery_of`): ``Run.recovery`` and
    ``Run.resumed_tokens``, which the worker then follows (continue, or ``reset`` and start over).

    A run's first attempt (queued, never started, no answer in its stream: nearly every run) is claimed in two
    statements and no transaction (:func:`_claim_first_attempt`); every other case takes the locking read.
    """
    first = _claim_first_attempt(run_id=run_id, worker=worker, streamed=streamed)
    if first is not None:
        return first, True
    with transaction.atomic():
        # What the worker reads next and what its end settles with (_CLAIM_RELATED), in the same round trip; only
        # the run's row is locked.
        run = Run.objects.select_for_update(of=("self",)).select_related(*_CLAIM_RELATED).get(pk=run_id)
        if run.is_terminal:
            return run, False
        if run.status == RunStatus.CANCELLING:
            return run_end(run, status=RunStatus.CANCELLED), True
        if run.attempts - run.handoffs >= settings.WORKERS.max_attempts:
            error = f"Generation was started {run.attempts} times and never finished; giving up."
            return run_end(run, status=RunStatus.FAILED, error=error), True
        run.recovery, run.resumed_tokens = run_recovery_of(run, streamed)
        run.status = RunStatus.STREAMING
        run.attempts += 1
        run.worker = worker
        run.started_at = timezone.now()
        run.first_token_at = None
        run.save(
            update_fields=["status", "attempts", "worker", "started_at", "first_token_at", "recovery", "resumed_tokens"]
        )
        transaction.on_commit(lambda: _log_started(run, worker), robust=True)
        return run, True


def _claim_first_attempt(*, run_id: int, worker: str, streamed: StreamedAnswer | None) -> Run | None:
    """:func:`run_mark_streaming` for a run's first attempt, in two round trips instead of four (``BEGIN``, the
    locking read, the update, ``COMMIT``): the run read with what the worker needs next (no lock), then one
    conditional ``UPDATE`` that claims it only while it is still queued and unstarted, so a cancel or another claim
    that got there first makes it change nothing. None (nothing written) when the run is not such a run, or was
    changed meanwhile: the caller's locking read then decides. Raises ``Run.DoesNotExist`` as that read does."""
    if streamed is not None and (streamed.text or streamed.tokens):  # an answer to go on from, or to reset
        return None
    if settings.WORKERS.max_attempts < 1:
        return None
    run = _claim_read.get(run_id)
    if run.status != RunStatus.QUEUED or run.attempts != 0:
        return None
    claimed = {
        "status": RunStatus.STREAMING,
        "attempts": 1,
        "worker": worker,
        "started_at": timezone.now(),
        "first_token_at": None,
        "recovery": Recovery.NONE,
        "resumed_tokens": 0,
    }
    with connection.cursor() as cursor:  # (one statement, with no query to compile: it is the same for every run)
        params: list[Any] = [*claimed.values(), run_id, str(RunStatus.QUEUED)]
        cursor.execute(_first_claim_sql(), params)
        if cursor.rowcount != 1:
            return None
    for field, value in claimed.items():
        setattr(run, field, value)
    _log_started(run, worker)
    return run


@functools.cache
def _first_claim_sql() -> str:
    """``_claim_first_attempt``'s ``UPDATE``: its fields set (in its order) while the run is queued and unstarted."""
    quote = connection.ops.quote_name
    fields = ["status", "attempts", "worker", "started_at", "first_token_at", "recovery", "resumed_tokens"]
    columns = ", ".join(f"{quote(name)} = %s" for name in fields)  # (plain fields: each column is its name)
    table = quote(Run._meta.db_table)
    return f"UPDATE {table} SET {columns} WHERE id = %s AND status = %s AND attempts = 0"  # noqa: S608 (names only)


def _log_started(run: Run, worker: str) -> None:
    log_run_step(
        RunStep.STARTED,
        run,
        f"run {run.pk} started on {worker} (attempt {run.attempts})",
        attempt=run.attempts,
        queue_wait_s=seconds_between(run.created_at, run.started_at),
        recovery=run.recovery,
        resumed_tokens=run.resumed_tokens,
    )


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
    """Records when this attempt's first token came (once: a later call changes nothing). One statement whose text
    is built once, like the first claim's (Django compiled the ``update`` anew for every run)."""
    with connection.cursor() as cursor:
        cursor.execute(_first_token_sql(), [timezone.now(), run_id, attempt])


@functools.cache
def _first_token_sql() -> str:
    table, column = connection.ops.quote_name(Run._meta.db_table), connection.ops.quote_name("first_token_at")
    return f"UPDATE {table} SET {column} = %s WHERE id = %s AND attempts = %s AND {column} IS NULL"  # noqa: S608


def run_finish(*, run_id: int, attempt: int, result: GenerationResult, claimed: Run | None = None) -> Run | None:
    """Ends the attempt's run with its result: the assistant message, the counts and the final status, in one
    transaction.

    Returns None when this attempt no longer owns the run (a later attempt took over, or it was failed).
    A run that was being cancelled (or whose request the engine aborted) ends ``cancelled`` and keeps the
    partial text as its assistant message, if there is any.

    ``claimed``: the run as this attempt claimed it (:func:`run_mark_streaming`'s, with its relations). The common
    end, a run still ``streaming`` under this attempt that the engine did not abort, is then one statement
    (:func:`_finish_claimed`); any other, or one that changed since the claim, takes the locking read below.
    """
    if claimed is not None:
        finished = _finish_claimed(claimed, attempt=attempt, result=result)
        if finished is not None:
            return finished
    with transaction.atomic():
        # The chat is locked with the run (its row is written below); the tier, the user and their limits come
        # along for the settlement and the log line after commit, instead of three queries there. Nothing more is
        # joined: Postgres plans this read for every run, and its planning time grows with each relation joined
        # (bench/finish_read_cost.py: 0.55-0.8 ms of planning with these six, 2.0-2.2 ms with the deployment and the
        # replaced answer too; 1.3 ms less of the worker's CPU). The replaced answer is read when a continued run
        # needs its text, and the deployment's key comes from the process's snapshot.
        run = (
            Run.objects.select_for_update(of=("self", "chat"))
            .select_related("chat", "tier", "user__tier", "user__limit_override")
            .get(pk=run_id)
        )
        if run.status not in (RunStatus.STREAMING, RunStatus.CANCELLING) or run.attempts != attempt:
            return None
        engine_finish = EngineFinishReason(result.finish_reason)
        cancelled = run.status == RunStatus.CANCELLING or engine_finish == EngineFinishReason.ABORT
        message = None
        if result.text or not cancelled:
            message = Message.objects.create(chat=run.chat, role=MessageRole.ASSISTANT, **_answer_fields(run, result))
            if run.replaces_id is not None:  # regenerated or continued: the replaced answer becomes an earlier version
                Message.objects.filter(pk=run.replaces_id).update(superseded=True)
        if cancelled:
            run_end(run, status=RunStatus.CANCELLED, result=result, message=message)
        else:
            run_end(
                run, status=RunStatus.DONE, finish_reason=_ENGINE_FINISH[engine_finish], result=result, message=message
            )
        Chat.objects.filter(pk=run.chat_id).update(updated_at=run.finished_at, last_worker=run.worker)
        chat = run.chat  # read locked above, its owner (the run's user) with their tier: the check reads no chat
        chat.owner = run.user
        _after_finish(run, chat=chat)
        return run


def _after_finish(run: Run, *, chat: Chat | None) -> None:
    """On commit of a run's finish: the chat's summary check (a chat of the browser UI; ``chat``: as the finish read
    it, else the check reads it) and the answer cache."""
    chat_id = run.chat_id
    if run.chat.origin == ChatOrigin.WEB:  # an OpenAI-compatible call's chat is never continued: no summary
        served = deployment_by_id(run.deployment_id)
        deployment = served.key if served is not None else ""
        transaction.on_commit(
            lambda: chat_summary_schedule_after_turn(chat_id=chat_id, deployment=deployment, chat=chat)
        )
    transaction.on_commit(lambda: _store_in_cache(run), robust=True)


def _finish_claimed(run: Run, *, attempt: int, result: GenerationResult) -> Run | None:
    """:func:`run_finish` of a run that this attempt claimed (``run``, as claimed) and the engine did not abort, in one
    statement instead of seven (``BEGIN``, the locking read, the message, the run, the usage, the chat, ``COMMIT``):
    :func:`_finish_sql` ends the run ``done`` only while it is still ``streaming`` under this attempt, and the
    assistant message, the superseded answer it replaces, the chat and the day's usage are written with it or not at
    all. None, with nothing written, when the run is not such a run or changed since the claim (a cancel, the reaper,
    another attempt): the caller's locking read then decides.

    The tier, the user and their limits that the settlement after commit uses are the claim's. The chat of the
    browser UI is read again for its summary check: the claim's copy may predate a summary written since."""
    engine_finish = EngineFinishReason(result.finish_reason)
    if run.status != RunStatus.STREAMING or run.attempts != attempt or engine_finish == EngineFinishReason.ABORT:
        return None
    answer = _answer_fields(run, result)
    now = timezone.now()
    finish_reason = _ENGINE_FINISH[engine_finish]
    content_field = Message._meta.get_field("content")
    params: list[Any] = [
        # the run (the message's id comes from its sequence, in the statement)
        str(RunStatus.DONE),
        str(finish_reason),
        now,
        result.input_tokens,
        result.output_tokens,
        json.dumps(list(result.passes)),
        run.pk,
        str(RunStatus.STREAMING),
        attempt,
        # the message
        str(MessageRole.ASSISTANT),
        content_field.get_db_prep_save(answer["content"], connection),
        answer["token_count"],
        now,
        str(answer.get("moderation", Moderation.NONE)),
        # the chat, the usage
        now,
        run.worker,
        now.date(),
        result.input_tokens,
        result.output_tokens,
    ]
    if run.replaces_id is not None:  # regenerated or continued: the replaced answer becomes an earlier version
        params.append(run.replaces_id)
    with connection.cursor() as cursor:
        cursor.execute(_finish_sql(supersedes=run.replaces_id is not None), params)
        row = cursor.fetchone()
    if row is None:
        return None
    message = Message(id=row[0], chat=run.chat, role=MessageRole.ASSISTANT, created_at=now, **answer)
    message._state.adding = False
    run.status, run.finish_reason, run.finished_at = RunStatus.DONE, finish_reason, now
    run.input_tokens, run.output_tokens = result.input_tokens, result.output_tokens
    run.first_token_at = row[1]  # (the claim's copy predates it: the metrics and the log record read it)
    run.passes = [*run.passes, *result.passes]
    run.assistant_message = message
    run.chat.updated_at, run.chat.last_worker = now, run.worker
    _after_end(run, usage_recorded=True)
    _after_finish(run, chat=None)
    return run


@functools.cache
def _finish_sql(*, supersedes: bool) -> str:
    """:func:`_finish_claimed`'s statement; ``supersedes``: it also marks the answer the run replaces superseded.

    The run's ``UPDATE`` is the guard (``streaming``, this attempt); the message's id is taken from its sequence first,
    so that the run can point at it in the same statement, and every other write selects from the updated run: none
    happens when the guard matched nothing. It returns the message's id and the run's first token's time (written
    while the run streamed, after the claim read it), or no row."""
    quote = connection.ops.quote_name
    run_table, message_table, chat_table = (quote(m._meta.db_table) for m in (Run, Message, Chat))
    run_set = ", ".join(
        f"{quote(name)} = %s" for name in ("status", "finish_reason", "finished_at", "input_tokens", "output_tokens")
    )
    message_columns = ", ".join(
        quote(name) for name in ("id", "chat_id", "role", "content", "token_count", "created_at", "moderation")
    )
    ended = (
        f"UPDATE {run_table} SET {run_set}, passes = passes || %s::jsonb, "  # noqa: S608 (names only)
        "assistant_message_id = (SELECT id FROM message_id) "
        "WHERE id = %s AND status = %s AND attempts = %s RETURNING chat_id, user_id, first_token_at"
    )
    message = (
        f"INSERT INTO {message_table} ({message_columns}, superseded) "  # noqa: S608 (names only)
        "SELECT message_id.id, ended.chat_id, %s, %s, %s, %s, %s, false FROM ended, message_id"
    )
    chat = f"UPDATE {chat_table} SET updated_at = %s, last_worker = %s WHERE id = (SELECT chat_id FROM ended)"  # noqa: S608
    parts = [
        f"message_id AS (SELECT nextval(pg_get_serial_sequence('{Message._meta.db_table}', 'id')) AS id)",
        f"ended AS ({ended})",
        f"message AS ({message})",
        f"chat AS ({chat})",
        f"usage AS ({usage_record_sql('SELECT user_id, %s::date, 1, %s, %s FROM ended')})",  # noqa: S608
    ]
    if supersedes:
        superseded = f"UPDATE {message_table} SET superseded = true WHERE id = %s"  # noqa: S608 (names only)
        parts.append(f"superseded AS ({superseded} AND EXISTS (SELECT 1 FROM ended))")  # noqa: S608
    return f"WITH {', '.join(parts)} SELECT message_id.id, ended.first_token_at FROM message_id, ended"  # noqa: S608


def _store_in_cache(run: Run) -> None:
    """A missed prompt's answer goes to the answer cache (``runs.passes.cache``); a failure there loses only that."""
    try:
        cache_after_finish(run=run)
    except Exception:
        logger.exception("run %s: its answer could not be stored in the answer cache", run.pk)


CACHE_WORKER = "answer-cache"
"""The ``worker`` of a run the answer cache answered: no engine generated it."""


def run_answer_from_cache(*, run_id: int, answer: str) -> Run | None:
    """Answers a queued run with a cached answer (``runs.passes.cache``: its prompt hit), through the same run and
    stream path as a generated one: ``status`` and one ``delta`` in its stream, the assistant message, the run
    ``done`` (``stop``) with no engine tokens counted (its reservation is refunded whole), the terminal event after
    commit. None when the run is no longer queued (cancelled meanwhile). Never queued, so no worker sees it."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update(of=("self", "chat"))
            .select_related("chat", "tier", "user__tier", "user__limit_override")
            .get(pk=run_id)
        )
        if run.status != RunStatus.QUEUED:
            return None
        now = timezone.now()
        run.status, run.worker, run.attempts = RunStatus.STREAMING, CACHE_WORKER, 1
        run.started_at = run.first_token_at = now
        run.save(update_fields=["status", "worker", "attempts", "started_at", "first_token_at"])
        writer = RunStreamWriter(run.pk)
        writer.append(StreamEvent.STATUS, {"status": RunStatus.STREAMING, "attempt": 1, "worker": CACHE_WORKER})
        writer.append(StreamEvent.DELTA, {"text": answer, "tokens": 0, "prompt_tokens": 0})
        message = Message.objects.create(chat=run.chat, role=MessageRole.ASSISTANT, content=answer, token_count=0)
        result = GenerationResult(text=answer, input_tokens=0, output_tokens=0, finish_reason=EngineFinishReason.STOP)
        run_end(run, status=RunStatus.DONE, finish_reason=FinishReason.STOP, result=result, message=message)
        Chat.objects.filter(pk=run.chat_id).update(updated_at=run.finished_at)
        return run


def _answer_fields(run: Run, result: GenerationResult) -> dict[str, object]:
    """The stored answer: the generated text, after the replaced answer's when the run continues it."""
    if result.finish_reason == EngineFinishReason.CONTENT_FILTER:  # withdrawn: as the stream's `retract` shows it
        return {"content": "", "token_count": 0, "moderation": Moderation.RETRACTED}
    if run.revision == Revision.CONTINUE and run.replaces is not None:
        return {
            "content": run.replaces.content + result.text,
            "token_count": run.replaces.token_count + result.output_tokens,
        }
    return {"content": result.text, "token_count": result.output_tokens}


def run_fail(*, run_id: int, error: str, attempt: int | None = None) -> Run | None:
    """Ends a run ``failed`` with ``error``; None if it is already terminal or ``attempt`` no longer owns it."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_terminal or (attempt is not None and run.attempts != attempt):
            return None
        return run_end(run, status=RunStatus.FAILED, error=error)


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
            return run_end(run, status=RunStatus.CANCELLED)
        return _requeue(run, worker=worker, reason="worker_lost", why=f"worker {worker} vanished")


def run_handoff(*, run_id: int, attempt: int, worker: str, reason: str = "handoff") -> Run | None:
    """Hands a run that ``worker``'s attempt ``attempt`` was generating back to the queue, to be continued from the
    text already streamed: its worker drains past its deadline (``reason`` ``handoff``: another worker of the model
    goes on with it), or the dispatcher preempted it for a user below their share (``preempted``). An attempt handed
    off ended cleanly: it does not count against ``WORKER_MAX_ATTEMPTS`` (``Run.handoffs``).

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
        run.handoffs += 1
        run.save(update_fields=["handoffs"])
        why = "it was preempted" if reason == "preempted" else f"worker {worker} handed it off"
        return _requeue(run, worker=worker, reason=reason, why=why)


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
    transaction.on_commit(lambda: run_enqueue(run=run, requeued=True))
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
