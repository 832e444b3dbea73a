"""Reads for the browser UI."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import redis

from accounts.limits import EffectiveLimits, user_limits
from accounts.models import User
from runs.quota import bucket_limits, get_token_buckets

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccountSummary:
    user: User
    limits: EffectiveLimits
    """The tier's limits with the user's overrides applied."""
    remaining_tokens: int | None
    """Tokens in the user's admission bucket now (it refills over time); ``None`` when Redis cannot say."""


def remaining_budget(*, user: User, limits: EffectiveLimits) -> int | None:
    """The user's token bucket as admission sees it now (read only: refilled, not written back)."""
    try:
        tokens = get_token_buckets().bucket_tokens(user_id=user.pk, limits=bucket_limits(limits))
    except redis.RedisError:
        logger.warning("cannot read the token bucket of user %s", user.pk, exc_info=True)
        return None
    return max(0, math.floor(tokens))


def account_summary(*, user: User) -> AccountSummary:
    limits = user_limits(user=user)
    return AccountSummary(user=user, limits=limits, remaining_tokens=remaining_budget(user=user, limits=limits))
