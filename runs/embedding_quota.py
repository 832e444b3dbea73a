"""Admission and metering of embedding requests, against the same budgets as prompts (``runs.quota``).

An embedding request reserves its input tokens in the user's token bucket (the same Lua step as a prompt: bucket,
concurrent requests, tier queue depth), so embeddings and chats share one budget. There is no output: once the
vectors are back the reservation is settled with every token used, and the day's usage row counts the request and
its tokens (``accounts.limits.embedding_usage_record``); a request that failed settles with none used and records
nothing. A refused request (429 with ``Retry-After``, or 400 when it could never fit) has written nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from accounts.limits import EffectiveLimits, embedding_usage_record, user_limits
from accounts.models import User
from runs.quota import bucket_limits, get_token_buckets, quota_reserve

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddingTicket:
    user_id: int
    tier: str
    reservation_id: str
    tokens: int
    limits: EffectiveLimits


def embedding_admit(*, user: User, tokens: int) -> EmbeddingTicket:
    """Reserves ``tokens`` for one embedding request, or raises the prompt path's 429/400 (nothing written)."""
    limits = user_limits(user=user)
    ticket = quota_reserve(user=user, limits=limits, input_tokens=tokens, max_tokens=0)
    return EmbeddingTicket(
        user_id=user.pk, tier=limits.tier, reservation_id=ticket.reservation_id, tokens=tokens, limits=limits
    )


def embedding_settle(*, ticket: EmbeddingTicket, answered: bool) -> None:
    """Ends the reservation (all tokens used when ``answered``, none otherwise) and, when answered, records the
    request in the day's usage."""
    if answered:
        embedding_usage_record(user_id=ticket.user_id, tokens=ticket.tokens)
    try:
        get_token_buckets().settle(
            user_id=ticket.user_id,
            tier=ticket.tier,
            member=ticket.reservation_id,
            used_tokens=ticket.tokens if answered else 0,
            limits=bucket_limits(ticket.limits),
        )
    except redis.RedisError:  # the pending reservation expires on its own
        logger.exception("settling embedding reservation %s failed", ticket.reservation_id)
