"""Writes of memory, and the recall a prompt's pass calls (docs/memory.md).

Memory never fails a prompt: a prompt that cannot be embedded in time recalls nothing (and is not kept), which the
run's pass records. Adding a memory by hand does need its embedding: that is a 503 the user can retry.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from accounts.models import Tier, User
from chats.models import Message
from core.errors import DomainError
from core.vector_index import IndexedRow, pack, to_unit
from deployments.embeddings import EmbeddingUnavailable, embed
from deployments.models import DeploymentKind
from deployments.selection import resolve_model
from deployments.tokenizer import count_tokens
from memory.index import index_catch_up, index_key, process_index
from memory.models import MAX_MEMORY_CHARS, Memory
from memory.selectors import memories_for_recall, memory_available, tier_memory

log = logging.getLogger(__name__)

Embedded = tuple[list[float], str]
"""A text's vector and the embedding deployment's ``name@version`` it came from."""

RECALL_HEADING = "What the user said in other chats (use it only where it helps with this message):"
DUPLICATE_SIMILARITY = 0.97
"""A prompt this close (cosine) to one of the user's memories, in any chat, is not kept again: asking the same thing
twice must not fill the memory (and the recalled top k) with copies."""
EXTRA_CANDIDATES = 8
"""Nearest memories read beyond ``top_k``: those said in the chat being answered, or deleted since the index saw
them, must not hide the next best."""


class MemoryOff(DomainError):
    status_code = 409
    code = "memory_unavailable"


@dataclass(frozen=True)
class Recalled:
    id: int
    content: str
    similarity: float


@dataclass(frozen=True)
class Recall:
    """What a prompt recalled (most similar first, within the tier's ``top_k`` and ``max_tokens``), the prompt's
    embedding (which the caller may reuse), and what it cost."""

    memories: list[Recalled] = field(default_factory=list)
    embedded: Embedded | None = None
    nearest: float = 0.0
    """The similarity of the user's closest memory, in any chat (the chat being answered included): a prompt at
    :data:`DUPLICATE_SIMILARITY` or above is already remembered."""
    embed_ms: float = 0.0
    lookup_ms: float = 0.0

    @property
    def texts(self) -> list[str]:
        return [m.content for m in self.memories]

    @functools.cached_property
    def digest(self) -> str:
        """What the recalled memories add to an answer cache key (``CacheKeyParts.context_digest``; "" for none)."""
        return hashlib.sha256(memory_block(self.texts).encode()).hexdigest() if self.memories else ""


def memory_block(texts: Sequence[str]) -> str:
    """The text the prompt carries for recalled memories ("" for none): a heading and one line each."""
    if not texts:
        return ""
    return "\n".join([RECALL_HEADING, *(f"- {' '.join(text.split())}" for text in texts)])


def memory_active(*, user: User, tier: Tier) -> bool:
    """Whether memory is on for this user's prompts: their opt-in (read with the user: no query), the product's
    switch and the tier's policy (a per-process snapshot)."""
    return user.memory_enabled and memory_available(tier=tier)


def embed_text(text: str) -> Embedded:
    """``text``'s vector from the memory embedding deployment; :class:`DomainError` (no such deployment, no worker,
    no answer within ``MEMORY_EMBED_TIMEOUT_S``)."""
    config = settings.MEMORY
    embedder = resolve_model(config.embedding_model, kind=DeploymentKind.EMBED)
    [vector] = embed([text], embedder, timeout_s=config.embed_timeout_s)
    return vector, embedder.key


def memory_recall(*, user_id: int, tier: Tier, prompt: str, chat_id: int | None) -> Recall:
    """The user's memories from chats other than ``chat_id`` that are relevant to ``prompt``: one call to the
    embedding deployment, the user's partition's nearest memories, each checked against its row; at most the tier's
    ``top_k``, those at or above its ``min_similarity``, within its ``max_tokens``. An empty recall (with no
    embedding) when the prompt could not be embedded."""
    policy = tier_memory(tier=tier)
    started = time.perf_counter()
    try:
        vector, model = embed_text(prompt)
    except DomainError as exc:
        log.warning("memory: the prompt was not embedded (%s)", exc)
        return Recall(embed_ms=(time.perf_counter() - started) * 1000)
    embedded = time.perf_counter()
    index = process_index()
    index_catch_up(index)
    found = [
        (memory_id, similarity)
        for memory_id, similarity in index.search(
            index_key(user_id, model), to_unit(vector), policy.top_k + EXTRA_CANDIDATES
        )
        if similarity >= policy.min_similarity
    ]
    rows = memories_for_recall(user_id=user_id, ids=[m for m, _ in found]) if found else {}
    memories: list[Recalled] = []
    budget = policy.max_tokens
    nearest = 0.0
    seen: set[str] = set()
    for memory_id, similarity in found:
        row = rows.get(memory_id)
        if row is None:
            continue  # deleted since the index saw it, or (never) another user's
        content, source_chat = row
        nearest = max(nearest, similarity)
        said = " ".join(content.lower().split())
        if source_chat == chat_id or said in seen or len(memories) == policy.top_k:
            continue  # the chat being answered holds it already; a copy adds nothing
        tokens = count_tokens(content)
        if tokens > budget:
            continue
        budget -= tokens
        seen.add(said)
        memories.append(Recalled(id=memory_id, content=content, similarity=similarity))
    done = time.perf_counter()
    return Recall(
        memories=memories,
        embedded=(vector, model),
        nearest=nearest,
        embed_ms=(embedded - started) * 1000,
        lookup_ms=(done - embedded) * 1000,
    )


def _store(
    *, user_id: int, content: str, embedded: Embedded, chat_id: int | None = None, message_id: int | None = None
) -> Memory:
    vector, model = embedded
    unit = to_unit(vector)
    memory = Memory.objects.create(
        user_id=user_id,
        chat_id=chat_id,
        message_id=message_id,
        content=content,
        embedding=pack(unit),
        embedding_model=model,
    )
    index = process_index()
    transaction.on_commit(
        lambda: index.add([IndexedRow(id=memory.pk, index_key=index_key(user_id, model), vector=unit)])
    )
    return memory


def memory_keep(*, user_id: int, message: Message, recall: Recall) -> Memory | None:
    """Keeps a prompt the user posted in a chat as a memory (its embedding from the recall that embedded it), unless
    it is too short to say anything (``MEMORY_MIN_CHARS``), was not embedded, or is already remembered (a memory at
    :data:`DUPLICATE_SIMILARITY` or closer, which the recall found)."""
    content = message.content.strip()[:MAX_MEMORY_CHARS]
    if recall.embedded is None or len(content) < settings.MEMORY.min_chars or recall.nearest >= DUPLICATE_SIMILARITY:
        return None
    return _store(
        user_id=user_id, content=content, embedded=recall.embedded, chat_id=message.chat_id, message_id=message.pk
    )


def memory_add(*, user: User, content: str) -> Memory:
    """A memory the user added by hand (the API, the UI); :class:`MemoryOff` when memory is off for them,
    :class:`EmbeddingUnavailable` (503) when it cannot be embedded now, whatever the reason (no embedding deployment
    registered, none ready, no worker answering, a worker failing): the user can only retry later, and the
    operator's side of it is in the message."""
    if not memory_available(tier=user.tier):
        raise MemoryOff("Memory is switched off for your tier: nothing can be added to it.")
    text = content.strip()[:MAX_MEMORY_CHARS]
    try:
        embedded = embed_text(text)
    except EmbeddingUnavailable:
        raise
    except DomainError as exc:
        raise EmbeddingUnavailable(f"The memory cannot be embedded right now ({exc}); try again later.") from exc
    return _store(user_id=user.pk, content=text, embedded=embedded)


def memory_delete(*, memory: Memory) -> None:
    """Deletes one memory: gone from Postgres at once, from this process's index too (others drop it at their
    reconcile, and never recall it meanwhile: the row check fails)."""
    memory_id = memory.pk
    memory.delete()
    process_index().discard([memory_id])


def memory_clear(*, user: User) -> int:
    """Deletes all the user's memories; returns how many."""
    ids = list(Memory.objects.filter(user=user).values_list("id", flat=True))
    Memory.objects.filter(user=user, pk__in=ids).delete()
    process_index().discard(ids)
    return len(ids)


def memory_settings_set(*, user: User, enabled: bool) -> None:
    """Turns the user's memory on or off (off stops keeping and recalling; their memories stay until deleted). The
    ``user`` is the request's, which this process's token cache shares: the change holds here at once, and in other
    web processes once their cached copy expires (``API_TOKEN_CACHE_S``; a session reads the user every request)."""
    if enabled and not memory_available(tier=user.tier):
        raise MemoryOff("Memory is switched off for your tier: it cannot be turned on.")
    user.memory_enabled = enabled
    user.save(update_fields=["memory_enabled"])
