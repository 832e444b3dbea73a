"""What ``GET /api/usage`` shows a user: their tier's limits, their token bucket now, their usage per day and
their last refusals (429s).

The refusals are kept in Redis, not Postgres: a capped list per user (``LPUSH`` + ``LTRIM`` to
:data:`REJECTIONS_KEPT` + ``EXPIRE``, one pipelined round trip) written by ``runs.quota`` on the refusal path only.
A refused prompt writes nothing to Postgres (the admission contract), a flood of refusals costs Redis one short
list per user whatever its rate, and the list expires with the user's inactivity.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from typing import Any

import redis
from django.utils import timezone

from accounts.limits import EffectiveLimits
from accounts.models import UsageDay, User
from core.redis_client import get_redis
from scheduling.token_bucket import TokenBuckets

logger = logging.getLogger(__name__)

REJECTIONS_KEPT = 20
REJECTIONS_TTL_S = 30 * 86400
DAILY_DAYS = 30


def rejections_key(user_id: int) -> str:
    return f"usage:rejections:{user_id}"


def rejection_record(*, user_id: int, code: str, reason: str, status: int = 429) -> None:
    """Remembers one refusal of the user's (best effort: a Redis error is logged, the 429 goes out anyway)."""
    entry = json.dumps({"at": timezone.now().isoformat(), "status": status, "code": code, "reason": reason})
    key = rejections_key(user_id)
    try:
        pipe = get_redis().pipeline(transaction=False)
        pipe.lpush(key, entry)
        pipe.ltrim(key, 0, REJECTIONS_KEPT - 1)
        pipe.expire(key, REJECTIONS_TTL_S)
        pipe.execute()
    except redis.RedisError:
        logger.warning("could not record a refusal of user %s", user_id, exc_info=True)


def rejection_list(*, user_id: int) -> list[dict[str, Any]]:
    """The user's last refusals, newest first."""
    return [json.loads(raw) for raw in get_redis().lrange(rejections_key(user_id), 0, REJECTIONS_KEPT - 1)]


def usage_summary(*, user: User, limits: EffectiveLimits, buckets: TokenBuckets, bucket_limits: Any) -> dict[str, Any]:
    """The ``/api/usage`` body (see the module); ``bucket_limits`` are ``limits`` as the token bucket takes them."""
    now = timezone.now()
    available = buckets.bucket_tokens(user_id=user.pk, limits=bucket_limits)
    capacity = limits.bucket_capacity_tokens
    missing = max(0.0, capacity - available)
    refill = limits.bucket_refill_per_s
    full_at = now + dt.timedelta(seconds=missing / refill) if refill > 0 else None
    in_flight = len(buckets.reservations(user_id=user.pk))
    since = now.date() - dt.timedelta(days=DAILY_DAYS - 1)
    days = UsageDay.objects.filter(user=user, day__gte=since).order_by("-day")
    return {
        "tier": {**dataclasses.asdict(limits), "context_limit_tokens": user.tier.context_limit_tokens},
        "buckets": [
            {
                "name": "tokens",
                "capacity": capacity,
                "available": round(available, 3),
                "refill_per_second": refill,
                "full_at": full_at if missing > 0 else now,
            },
            {
                "name": "concurrent_runs",
                "capacity": limits.max_concurrent_runs,
                "available": max(0, limits.max_concurrent_runs - in_flight),
                "refill_per_second": None,
                "full_at": None,
            },
        ],
        "daily": [
            {"date": d.day, "input_tokens": d.input_tokens, "output_tokens": d.output_tokens, "runs": d.runs}
            for d in days
        ],
        "rejections": rejection_list(user_id=user.pk),
    }
