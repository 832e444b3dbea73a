"""Reads of memory, always scoped to their user: the tier's policy, the user's opt-in, their memories, and the rows a
process's index is built from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db.models import Q, QuerySet

from accounts.models import Tier, User
from chats.models import SEARCH_CONFIG
from deployments.selection import Snapshot
from memory.models import Memory, MemoryPolicy


@dataclass(frozen=True)
class TierMemory:
    """A snapshot of one tier's ``MemoryPolicy`` (no database access through it)."""

    enabled: bool
    top_k: int
    min_similarity: float
    max_tokens: int


def _tier_memory(policy: MemoryPolicy) -> TierMemory:
    return TierMemory(
        enabled=policy.enabled,
        top_k=policy.top_k,
        min_similarity=policy.min_similarity,
        max_tokens=policy.max_tokens,
    )


_policies = Snapshot(
    lambda: {p.tier_id: _tier_memory(p) for p in MemoryPolicy.objects.all()}, lambda: settings.DEPLOYMENTS.cache_s
)


def tier_memory(*, tier: Tier) -> TierMemory:
    """The tier's memory policy as of at most ``DEPLOYMENT_CACHE_S`` ago (a tier without a row: the defaults)."""
    found: TierMemory | None = _policies.get().get(tier.pk)
    return found or _tier_memory(MemoryPolicy(tier=tier))


def forget_memory_policies() -> None:
    """The next read goes to Postgres (after an admin edit, and between tests)."""
    _policies.clear()


def memory_available(*, tier: Tier) -> bool:
    """Whether memory may be on for the tier's users: the product's switch and the tier's policy."""
    return settings.MEMORY.enabled and tier_memory(tier=tier).enabled


def memory_list(*, user: User, text: str = "") -> QuerySet[Memory]:
    """The user's memories (newest first when paged by id), those matching ``text`` (full-text, web-search syntax)
    when given."""
    rows = (
        Memory.objects.filter(user=user)
        .select_related("chat")
        .only("id", "content", "chat_id", "chat__title", "message_id", "created_at", "user_id")
    )
    if text.strip():
        query = SearchQuery(text, search_type="websearch", config=SEARCH_CONFIG)
        rows = rows.annotate(found=SearchVector("content", config=SEARCH_CONFIG)).filter(found=query)
    return rows


def memory_get(*, user: User, memory_id: int) -> Memory | None:
    """The user's memory, or None: another user's is indistinguishable from a missing one."""
    if not 0 < memory_id < 2**63:
        return None
    return Memory.objects.filter(pk=memory_id, user=user).first()


def memories_to_index(*, after_id: int, created_since: datetime) -> Iterator[tuple[int, int, str, bytes]]:
    """``(id, user id, embedding model, embedding)`` of the memories above ``after_id`` or created since
    ``created_since``, streamed in id order."""
    rows = (
        Memory.objects.filter(Q(id__gt=after_id) | Q(created_at__gte=created_since))
        .order_by("id")
        .values_list("id", "user_id", "embedding_model", "embedding")
    )
    for memory_id, user_id, model, embedding in rows.iterator(chunk_size=2000):
        yield memory_id, user_id, model, bytes(embedding)


def live_memory_ids() -> set[int]:
    return set(Memory.objects.values_list("id", flat=True))


def memories_for_recall(*, user_id: int, ids: Iterable[int]) -> dict[int, tuple[str, int | None]]:
    """``{id: (content, chat id)}`` of those of ``ids`` that still exist and are the user's. The index is derived and
    may lag: this read is what authorizes a recall."""
    rows = Memory.objects.filter(pk__in=list(ids), user_id=user_id).values_list("id", "content", "chat_id")
    return {memory_id: (content, chat_id) for memory_id, content, chat_id in rows}


def recalled_texts(*, user_id: int, ids: Iterable[int]) -> list[str]:
    """The contents of the user's memories ``ids``, in that order, leaving out those deleted since they were
    recalled (what the worker puts into the prompt)."""
    wanted = list(ids)
    found = dict(Memory.objects.filter(pk__in=wanted, user_id=user_id).values_list("id", "content"))
    return [found[memory_id] for memory_id in wanted if memory_id in found]
