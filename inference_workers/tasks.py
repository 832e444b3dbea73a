"""Celery tasks of the GPU workers, registered under the worker contract's names (thin: the work is in
:mod:`inference_workers.services` and :mod:`chats.summary`)."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from celery.exceptions import Reject
from django.conf import settings

from chats.models import Chat
from chats.summary import chat_summary_refresh, engine_has_room_for_background
from core.redis_client import get_redis
from generation.worker_contract import GENERATE_TASK, SUMMARIZE_TASK, summary_pending_key
from inference_workers.engine.base import EngineDead
from inference_workers.runtime import get_runtime
from inference_workers.services import generate_run
from inference_workers.summarize import generate_text
from runs.models import Run

logger = logging.getLogger(__name__)

SUMMARY_MAX_DEFERRALS = 120
"""A summary that stepped aside this many times gives up; the next finished turn schedules it again."""


@shared_task(name=GENERATE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def generate(run_id: int, engine_priority: int | None = None) -> str | None:
    """Generates run ``run_id`` on this worker's engine (idempotent for redeliveries), at vLLM priority
    ``engine_priority`` (the dispatcher's; None: the run's tier priority).

    A worker whose engine died (it is shutting down) hands the task back to the queue for a live worker.
    """
    try:
        status = generate_run(run_id=run_id, runtime=get_runtime(), engine_priority=engine_priority)
    except EngineDead as exc:
        logger.warning("run %s: this worker's engine is dead (%s); the task goes back to the queue", run_id, exc)
        raise Reject(str(exc), requeue=True) from exc
    except Run.DoesNotExist:
        logger.warning("run %s does not exist (deleted with its chat?); dropping the task", run_id)
        return None
    return status.value if status is not None else None


def _engine_generate(prompt: str, max_tokens: int) -> str:
    return generate_text(prompt=prompt, max_tokens=max_tokens, priority=settings.CONTEXT.summary_priority)


def engine_has_room() -> bool:
    """This worker's engine is quiet enough for background work (see ``CONTEXT.summary_max_engine_load``)."""
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
