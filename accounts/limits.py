"""A user's effective limits (tier + per-user overrides) and their daily token usage."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from accounts.models import Tier, User, UserLimitOverride


@dataclass(frozen=True)
class EffectiveLimits:
    tier: str
    priority: int
    bucket_capacity_tokens: int
    bucket_refill_per_s: float
    max_concurrent_runs: int
    max_output_tokens: int
    queue_depth_limit: int
    share_weight: float


def user_limits(*, user: User) -> EffectiveLimits:
    """The tier's limits with the user's overrides applied.

    No query when ``user`` was loaded with its tier and override (``select_related("tier", "limit_override")``,
    as the API's token authentication does); else one for the override (and one for the tier if not cached).
    """
    tier: Tier = user.tier
    override: UserLimitOverride | None
    if User.limit_override.is_cached(user):
        override = getattr(user, "limit_override", None)  # cached: None (no row) raises DoesNotExist, no query
    else:
        override = UserLimitOverride.objects.filter(user_id=user.pk).first()

    def pick(field: str, default: float) -> float:
        value = getattr(override, field, None) if override is not None else None
        return default if value is None else value

    return EffectiveLimits(
        tier=tier.name,
        priority=tier.priority,
        bucket_capacity_tokens=int(pick("bucket_capacity_tokens", tier.bucket_capacity_tokens)),
        bucket_refill_per_s=float(pick("bucket_refill_per_s", tier.bucket_refill_per_s)),
        max_concurrent_runs=int(pick("max_concurrent_runs", tier.max_concurrent_runs)),
        max_output_tokens=int(pick("max_output_tokens", tier.max_output_tokens)),
        queue_depth_limit=tier.queue_depth_limit,
        share_weight=float(pick("share_weight", 1.0)),
    )


def usage_record(*, user_id: int, input_tokens: int, output_tokens: int) -> None:
    """Adds one ended run's tokens to the user's usage of today (UTC); safe under concurrent callers.

    One statement (``INSERT ... ON CONFLICT DO UPDATE`` on the ``usage_day_per_user`` constraint): the day's
    first run creates the row, later ones add to it, with no read and no savepoint."""
    with connection.cursor() as cursor:
        cursor.execute(
            usage_record_sql("VALUES (%s, %s, 1, %s, %s)"),
            [user_id, timezone.now().date(), input_tokens, output_tokens],
        )


def usage_record_sql(rows: str) -> str:
    """:func:`usage_record`'s upsert of ``rows``: a ``VALUES`` list or a ``SELECT`` whose columns are the user id, the
    day, 1 (the run), the input and the output tokens. ``runs.lifecycle`` runs it as part of the statement that ends a
    run, selecting from the run it updated."""
    return (
        f"INSERT INTO accounts_usageday AS u (user_id, day, runs, input_tokens, output_tokens) {rows} "
        "ON CONFLICT (user_id, day) DO UPDATE SET runs = u.runs + 1, "
        "input_tokens = u.input_tokens + EXCLUDED.input_tokens, "
        "output_tokens = u.output_tokens + EXCLUDED.output_tokens"
    )


def embedding_usage_record(*, user_id: int, tokens: int) -> None:
    """Adds one answered ``/v1/embeddings`` request and its input tokens to the user's usage of today (UTC); one
    statement, safe under concurrent callers (as :func:`usage_record`)."""
    sql = (
        "INSERT INTO accounts_usageday AS u "
        "(user_id, day, runs, input_tokens, output_tokens, embedding_requests, embedding_tokens) "
        "VALUES (%s, %s, 0, 0, 0, 1, %s) ON CONFLICT (user_id, day) DO UPDATE SET "
        "embedding_requests = u.embedding_requests + 1, "
        "embedding_tokens = u.embedding_tokens + EXCLUDED.embedding_tokens"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, timezone.now().date(), tokens])
