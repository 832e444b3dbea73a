"""Reads: a tier's cache policy, and the rows a process's index is built from."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import Q, QuerySet

from accounts.models import Tier
from answer_cache.models import CacheEntry, CachePolicy
from deployments.models import DeploymentStatus


def cache_policy_for(*, tier: Tier) -> CachePolicy:
    """The tier's policy; a tier without a row (made after the data migration) gets the defaults, unsaved, until an
    admin saves one."""
    policy = CachePolicy.objects.filter(tier=tier).first()
    return policy if policy is not None else CachePolicy(tier=tier)


_policies: dict[int, tuple[float, CachePolicy]] = {}
_policies_lock = threading.Lock()


def cache_policy_cached(*, tier: Tier) -> CachePolicy:
    """:func:`cache_policy_for`, kept per process ``MODERATION_POLICY_CACHE_S`` (the run's pass reads it for every
    prompt; an admin's edit shows within that time, as a moderation policy's does)."""
    now = time.monotonic()
    found = _policies.get(tier.pk)
    if found is not None and found[0] > now:
        return found[1]
    policy = cache_policy_for(tier=tier)
    with _policies_lock:
        _policies[tier.pk] = (now + settings.MODERATION.policy_cache_s, policy)
    return policy


def forget_cached_cache_policies() -> None:
    with _policies_lock:
        _policies.clear()


def live_entries(*, now: datetime) -> QuerySet[CacheEntry]:
    """Entries that may still be served: unexpired, their deployment not retired."""
    return CacheEntry.objects.filter(expires_at__gt=now).exclude(deployment__status=DeploymentStatus.RETIRED)


def entries_to_index(*, after_id: int, created_since: datetime, now: datetime) -> Iterator[tuple[int, str, str, bytes]]:
    """``(id, scope, partition, embedding)`` of the live entries above ``after_id`` or created since
    ``created_since`` (what a process's index catches up with), streamed in id order."""
    rows = (
        live_entries(now=now)
        .filter(Q(id__gt=after_id) | Q(created_at__gte=created_since))
        .order_by("id")
        .values_list("id", "scope", "partition", "embedding")
    )
    for entry_id, scope, partition, embedding in rows.iterator(chunk_size=2000):
        yield entry_id, scope, partition, bytes(embedding)


def live_entry_ids(*, now: datetime) -> set[int]:
    return set(live_entries(now=now).values_list("id", flat=True))


def entry_for_hit(
    *, entry_id: int, scope: str, partition: str, user_id: int | None, now: datetime
) -> CacheEntry | None:
    """The entry a search found, when it may still answer: it exists, is unexpired, its deployment is not retired,
    and it is in the scope and partition searched (and, for a private scope, owned by ``user_id``). The index is
    derived and may lag: this check against the row is what authorizes a hit."""
    rows = live_entries(now=now).filter(pk=entry_id, scope=scope, partition=partition)
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    return rows.first()
