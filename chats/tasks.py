"""Celery tasks of chats: the rolling summary, written by the model at the lowest priority."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from chatproject.redis_client import get_redis
from chats.models import Chat, ChatOrigin
from chats.summary import chat_summary_is_due, chat_summary_refresh, engine_has_room_for_background

logger = logging.getLogger(__name__)

SUMMARIZE_TASK = "chats.summarize"
PENDING_TTL_S = 900


def summary_pending_key(chat_id: int) -> str:
    """Set while a summary task of the chat is queued or running: one at a time per chat."""
    return f"chat:{chat_id}:summary-pending"


def _engine_generate(prompt: str, max_tokens: int) -> str:
    from inference_workers.summarize import generate_text

    return generate_text(prompt=prompt, max_tokens=max_tokens, priority=settings.CONTEXT.summary_priority)


SUMMARY_MAX_DEFERRALS = 120
"""A summary that stepped aside this many times gives up; the next finished turn schedules it again."""


def engine_has_room() -> bool:
    """This worker's engine is quiet enough for background work (see ``CONTEXT.summary_max_engine_load``)."""
    from inference_workers.runtime import get_runtime

    host = get_runtime().host
    stats = host.stats()
    return engine_has_room_for_background(
        running=stats.running,
        waiting=stats.waiting,
        slots=host.engine.max_num_seqs,
        max_load=settings.CONTEXT.summary_max_engine_load,
    )


@shared_task(bind=True, name=SUMMARIZE_TASK, acks_late=True, ignore_result=True, max_retries=SUMMARY_MAX_DEFERRALS)
def chat_summarize(self: Task, chat_id: int) -> bool:
    """Refreshes the chat's rolling summary with this worker's engine (a no-op when it is not due).

    When the engine is busy with interactive runs the task steps aside: it is retried after
    ``CONTEXT.summary_defer_s`` and frees its worker thread meanwhile.
    """
    if not engine_has_room():
        if self.request.retries >= SUMMARY_MAX_DEFERRALS:
            get_redis().delete(summary_pending_key(chat_id))
            logger.info("chat %s: the engine stayed busy; summary skipped until the next turn", chat_id)
            return False
        raise self.retry(countdown=settings.CONTEXT.summary_defer_s)
    try:
        return chat_summary_refresh(chat_id=chat_id, generate=_engine_generate)
    except Chat.DoesNotExist:
        logger.info("chat %s is gone; no summary to write", chat_id)
        return False
    finally:
        get_redis().delete(summary_pending_key(chat_id))


def chat_summary_schedule(*, chat_id: int) -> bool:
    """Sends the summary task to the low-priority queue when the chat's summary is due; True if sent.

    Called after a run of the chat finished. The workers drain the summary queue last (``batch`` comes
    after the tier queues) and generate it at ``CONTEXT.summary_priority``, behind every interactive run.
    """
    chat = Chat.objects.select_related("owner__tier").filter(pk=chat_id).first()
    if chat is None or chat.origin != ChatOrigin.WEB or not chat_summary_is_due(chat=chat):
        return False  # an OpenAI-compatible call's chat is never continued: no summary to keep
    if not get_redis().set(summary_pending_key(chat_id), "1", nx=True, ex=PENDING_TTL_S):
        return False  # one is already on its way; it folds in everything up to its own start
    chat_summarize.apply_async(args=[chat_id], queue=settings.CONTEXT.summary_queue)
    return True


def chat_summary_schedule_after_turn(*, chat_id: int) -> None:
    """``chat_summary_schedule`` for the end of a run: a failure is logged, never raised into the worker."""
    try:
        chat_summary_schedule(chat_id=chat_id)
    except Exception:  # the turn is stored; a missed summary is scheduled again after the next turn
        logger.exception("chat %s: could not schedule the summary", chat_id)
