"""What the passes around a run call (``runs``' pipeline): check a prompt, check a streamed window, record a
violation. Plain functions, keyword-only; docs/moderation.md says how they fit together."""

from __future__ import annotations

import math
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from accounts.models import Tier, User
from core.errors import DomainError
from core.redis_client import get_redis
from moderation.backends.local import NAME as LOCAL_NAME
from moderation.backends.local import warm_up as local_warm_up
from moderation.models import Direction, OutputMode, Violation
from moderation.selectors import PolicySnapshot, moderation_policy, suspended_until
from moderation.verdicts import Verdict, judge


class UserSuspended(DomainError):
    """The user's flagged prompts reached their tier's limit: no prompt is taken until ``until``. A 403 (the account
    may not, for now), with ``Retry-After`` in seconds so a program knows when to try again."""

    status_code = 403
    code = "moderation_suspended"

    def __init__(self, *, until: datetime, now: datetime) -> None:
        wait_s = max(1, math.ceil((until - now).total_seconds()))
        super().__init__(
            f"Your account may not send prompts until {until:%Y-%m-%d %H:%M} UTC: too many of your messages were "
            "flagged by moderation.",
            headers={"Retry-After": str(wait_s)},
        )
        self.until = until


def moderate_input(*, user: User, tier: Tier, text: str) -> Verdict:
    """The input pass: the prompt against ``tier``'s policy (its allow-list, backend and threshold).

    Raises :class:`UserSuspended` (403) when the user is suspended by escalation, whatever the prompt, and
    ``ModerationUnavailable`` (503) when the policy's backend cannot answer (the caller picks fail open or closed).
    Writes nothing: a flagged verdict is recorded by :func:`violation_record`, which the caller runs in the
    transaction that stores the refused message. Costs the classifier and one Redis ``EXISTS`` (whether the user has
    a recent violation, :func:`violation_marker_key`); only then one indexed query (the suspension)."""
    policy = moderation_policy(tier=tier)
    now = timezone.now()
    recent = policy.violations_before_suspension > 0 and get_redis().exists(violation_marker_key(user.pk))
    until = suspended_until(user=user, policy=policy, now=now) if recent else None
    if until is not None:
        raise UserSuspended(until=until, now=now)
    if not policy.input_enabled:
        return Verdict.unchecked(f"input moderation is off for the {tier.name} tier")
    return judge(text, backend=policy.backend, threshold=policy.threshold, allow_list=policy.allow_list)


def moderate_output_window(*, policy: PolicySnapshot, text: str) -> Verdict:
    """The output pass on one piece of a streamed answer (the held-back window, or the text flushed since the last
    check): the policy's backend, threshold and allow-list. Unchecked when the policy's output mode is ``off``.

    Pass a window, not the whole answer so far: the local classifier's features are normalised by length, so one
    offensive sentence in a long answer scores lower than the same sentence alone (docs/moderation.md). No
    database access; ``ModerationUnavailable`` when the backend cannot answer."""
    if policy.output_mode == OutputMode.OFF:
        return Verdict.unchecked(f"output moderation is off for the {policy.tier_name} tier")
    return judge(text, backend=policy.backend, threshold=policy.threshold, allow_list=policy.allow_list)


def violation_marker_key(user_id: int) -> str:
    """Set while the user has a violation recent enough to count towards a suspension (its TTL: the policy's window
    and suspension). Lost with Redis's data, it comes back with the user's next violation."""
    return f"moderation:violated:{user_id}"


def violation_record(
    *, user: User, tier: Tier, direction: Direction | str, verdict: Verdict, message_id: int | None
) -> Violation:
    """Stores a flagged verdict as the user's violation (``message_id``: the refused prompt or the retracted answer).

    Call it inside the transaction that stores that message, so the two land together or not at all. The row
    counts towards the user's suspension (``moderation.selectors.suspended_until``) from the next prompt on; the
    user's marker in Redis says so to the input pass (a prompt without it costs no query)."""
    policy = moderation_policy(tier=tier)
    marker_s = int((policy.violation_window + policy.suspension).total_seconds()) + 60
    # Set now, not on commit: a marker whose row rolls back costs one needless suspension query, never a miss.
    get_redis().set(violation_marker_key(user.pk), 1, ex=max(60, marker_s))
    return Violation.objects.create(
        user=user,
        tier_name=tier.name,
        direction=Direction(direction),
        message_id=message_id,
        backend=verdict.backend,
        category_scores=verdict.scores,
        flagged_categories=verdict.flagged_categories,
    )


def moderation_warm_up() -> None:
    """Loads the configured default backend's model now, when it has one to load (the local classifier: 1.5-3.5 s
    here), so a process's first prompt or first streamed answer does not wait for it. Web and GPU workers call it at
    start."""
    if settings.MODERATION.backend == LOCAL_NAME:
        local_warm_up()
