"""Reads: a tier's policy (cached briefly per process), a user's suspension, violation counts."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Tier, User
from moderation.models import ModerationPolicy, Violation


@dataclass(frozen=True)
class PolicySnapshot:
    """A tier's :class:`~moderation.models.ModerationPolicy` as plain values: what the passes read, safe to keep
    across threads and requests (the row may change; a snapshot lives ``MODERATION_POLICY_CACHE_S``)."""

    tier_id: int
    tier_name: str
    input_enabled: bool
    output_mode: str
    """``off``, ``holdback`` or ``retract`` (``moderation.models.OutputMode``)."""
    holdback_tokens: int
    backend: str
    """``default`` (``MODERATION_BACKEND``), ``local`` or ``http``."""
    threshold: float
    allow_list: tuple[str, ...]
    violations_before_suspension: int
    """0: violations never suspend."""
    violation_window: timedelta
    suspension: timedelta


def snapshot_of(policy: ModerationPolicy, tier: Tier) -> PolicySnapshot:
    return PolicySnapshot(
        tier_id=tier.pk,
        tier_name=tier.name,
        input_enabled=policy.input_enabled,
        output_mode=policy.output_mode,
        holdback_tokens=policy.holdback_tokens,
        backend=policy.backend,
        threshold=policy.threshold,
        allow_list=tuple(line.strip() for line in policy.allow_list.splitlines() if line.strip()),
        violations_before_suspension=policy.violations_before_suspension,
        violation_window=timedelta(hours=policy.violation_window_hours),
        suspension=timedelta(minutes=policy.suspension_minutes),
    )


_cache: dict[int, tuple[float, PolicySnapshot]] = {}
_cache_lock = threading.Lock()


def moderation_policy(*, tier: Tier) -> PolicySnapshot:
    """The tier's policy; the model's defaults when the tier has no row (a tier made after the migration that gave
    each tier one). Kept ``MODERATION_POLICY_CACHE_S`` per process: the input pass reads it for every prompt."""
    now = time.monotonic()
    cached = _cache.get(tier.pk)
    if cached is not None and cached[0] > now:
        return cached[1]
    policy = ModerationPolicy.objects.filter(tier=tier).first() or ModerationPolicy(tier=tier)
    snapshot = snapshot_of(policy, tier)
    with _cache_lock:
        _cache[tier.pk] = (now + settings.MODERATION.policy_cache_s, snapshot)
    return snapshot


def forget_cached_policies() -> None:
    """Drops this process's cached policies (after an edit, in tests)."""
    with _cache_lock:
        _cache.clear()


def suspended_until(*, user: User, policy: PolicySnapshot, now: datetime | None = None) -> datetime | None:
    """When the user's suspension ends, or None when they are not suspended.

    A user is suspended for ``policy.suspension`` from a violation that makes ``violations_before_suspension`` of
    them within ``violation_window`` (LibreChat's violation scoring with a score of 1 per flagged message, its
    ``BAN_INTERVAL`` as a count in a sliding window, its ``BAN_DURATION`` as the suspension). While the window
    still holds that many, each further violation suspends again: the limit escalates for a user who goes on.
    One indexed query (the user's latest violations)."""
    limit = policy.violations_before_suspension
    if limit <= 0:
        return None
    now = now or timezone.now()
    latest = list(
        Violation.objects.filter(user=user, created_at__gt=now - policy.violation_window - policy.suspension)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    if len(latest) < limit or latest[0] - latest[-1] > policy.violation_window:
        return None
    until = latest[0] + policy.suspension
    return until if until > now else None


def violation_list(*, user: User | None = None) -> QuerySet[Violation]:
    """Violations, newest first (one user's when ``user`` is given)."""
    violations = Violation.objects.select_related("user", "message").order_by("-created_at")
    return violations.filter(user=user) if user is not None else violations


def violation_count(*, user: User, since: datetime | None = None) -> int:
    """How many violations the user has (since ``since`` when given)."""
    violations = Violation.objects.filter(user=user)
    return (violations.filter(created_at__gte=since) if since is not None else violations).count()
