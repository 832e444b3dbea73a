"""When a chat's rolling summary is refreshed: after a turn ends, if it is due, as a low-priority task.

The task itself (``summarize(chat_id)``) runs on a GPU worker, which owns the engine
(``inference_workers.tasks``); it is sent here by name through the worker contract.
"""

from __future__ import annotations

import logging

from django.conf import settings

from chats.models import Chat, ChatOrigin
from chats.summary import chat_summary_is_due
from core.redis_client import get_redis
from generation.worker_contract import SUMMARY_PENDING_TTL_S, deployment_queue, send_summarize, summary_pending_key

logger = logging.getLogger(__name__)


def chat_summary_schedule(*, chat_id: int, deployment: str = "", chat: Chat | None = None) -> bool:
    """Sends the summary task to the low-priority queue when the chat's summary is due; True if sent.

    Called after a run of the chat finished. The workers drain the summary queue last (``batch`` comes
    after the tier queues) and generate it at ``CONTEXT.summary_priority``, behind every interactive run.
    ``deployment``: the ``name@version`` that served the turn: its workers write the summary (the plain queue,
    which the default deployment's workers consume, when empty). ``chat``: the chat with its owner and tier, when
    the caller has just read it (the run's end reads it locked), else it is read here.
    """
    if chat is None:
        chat = Chat.objects.select_related("owner__tier").filter(pk=chat_id).first()
    if chat is None or chat.origin != ChatOrigin.WEB or not chat_summary_is_due(chat=chat):
        return False  # an OpenAI-compatible call's chat is never continued: no summary to keep
    if not get_redis().set(summary_pending_key(chat_id), "1", nx=True, ex=SUMMARY_PENDING_TTL_S):
        return False  # one is already on its way; it folds in everything up to its own start
    queue = settings.CONTEXT.summary_queue
    send_summarize(chat_id=chat_id, queue=deployment_queue(queue, deployment) if deployment else queue)
    return True


def chat_summary_schedule_after_turn(*, chat_id: int, deployment: str = "", chat: Chat | None = None) -> None:
    """``chat_summary_schedule`` for the end of a run: a failure is logged, never raised into the worker."""
    try:
        chat_summary_schedule(chat_id=chat_id, deployment=deployment, chat=chat)
    except Exception:  # the turn is stored; a missed summary is scheduled again after the next turn
        logger.exception("chat %s: could not schedule the summary", chat_id)
