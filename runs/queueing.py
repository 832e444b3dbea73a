"""The Django side of the scheduler's queue: a committed run goes into its user's queue in Redis.

``run_enqueue`` is called after the transaction that created (or requeued) a run commits; the dispatcher
(``python manage.py run_dispatcher``, wired in ``runs.dispatcher_wiring``) sends it to its tier's Celery
queue when the engines have room.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import redis

from accounts.limits import EffectiveLimits, user_limits
from accounts.models import Tier
from chats.models import Chat
from core.redis_client import get_redis
from deployments.selection import deployment_by_id
from deployments.tokenizer import count_tokens
from runs.lifecycle_log import RunStep, log_run_step
from runs.models import Run
from scheduling.policy import QueuedRun
from scheduling.redis_store import RedisQueueStore

logger = logging.getLogger(__name__)


def _tier_names() -> list[str]:
    return list(Tier.objects.order_by("priority").values_list("name", flat=True))


@lru_cache(maxsize=1)
def get_scheduler_store() -> RedisQueueStore:
    """The scheduler's queues; the tiers are read from Postgres only if the caller reads the queues by tier. Each
    caller keeps it as the role it uses (``scheduling.store``: ``RunQueueWriter``, ``QueueMembership``, ...), but
    for a run's settlement, which sends its removal in a pipeline with the rest of a run's end."""
    return RedisQueueStore(get_redis(), tiers=_tier_names)


def estimate_tokens_by_chars(text: str) -> int:
    """Fallback when the model's tokenizer cannot be loaded: ~4 characters per token on English text."""
    return max(1, (len(text) + 3) // 4)


def count_input_tokens(text: str) -> int:
    """The new message's tokens with the serving model's tokenizer (falls back to a character estimate)."""
    try:
        return max(1, count_tokens(text))
    except Exception:
        logger.warning("tokenizer unavailable; estimating input tokens from characters", exc_info=True)
        return estimate_tokens_by_chars(text)


def run_enqueue(
    *,
    run: Run,
    limits: EffectiveLimits | None = None,
    requeued: bool = False,
    last_worker: str | None = None,
    pipe: redis.client.Pipeline | None = None,
) -> None:
    """Puts a committed queued run in its user's scheduler queue (idempotent). ``limits``: the user's, when the
    caller has just read them (a new prompt), else they are read here. ``last_worker``: the chat's
    ``last_worker`` when the caller has just read it (the prompt's statement returns it), else it is read here; the
    queue keeps it for chat affinity, so the dispatcher routes the run without reading Postgres (it cannot change
    while the run is unfinished: it is written when a run of the chat ends).

    ``requeued``: the run was dispatched and comes back (a hand-off, a preemption, a lost worker): it goes ahead of
    its user's other queued runs (it was sent before them, and its answer may be half streamed), and the fair-share
    charge of its first dispatch is refunded, since the next dispatch charges it again (the refund when it ends
    settles what it used).

    ``pipe``: the push is queued on it, for the caller to send with the rest of its round trip (a new prompt's
    admission, ``runs.quota.QuotaTicket.bind_on_commit``); the ``queued`` record is logged before it is sent."""
    limits = limits or user_limits(user=run.user)
    cost = run.reserved_tokens or (count_input_tokens(run.user_message.content) + run.max_tokens)
    served = deployment_by_id(run.deployment_id)
    if last_worker is None:
        last_worker = Chat.objects.filter(pk=run.chat_id).values_list("last_worker", flat=True).first() or ""
    store = get_scheduler_store()
    if requeued:
        store.add_refund(tier=run.tier.name, user_id=run.user_id, amount=cost / max(limits.share_weight, 1e-6))
    queued = QueuedRun(
        run_id=run.pk,
        user_id=run.user_id,
        tier=run.tier.name,
        cost=cost,
        weight=limits.share_weight,
        enqueued_at=run.created_at.timestamp(),
        deployment=served.key if served is not None else "",
        last_worker=last_worker,
    )
    if pipe is not None:
        store.push_in(pipe, queued, front=requeued)
    else:
        store.push(queued, front=requeued)
    log_run_step(RunStep.QUEUED, run, f"run {run.pk} queued for the {run.tier.name} tier", cost=cost)
