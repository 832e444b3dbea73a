"""What the run's passes call: :func:`cache_lookup` before a run is queued, :func:`cache_store` when it finished
well, the embedding stash between the two, and the purge of expired and retired entries.

The cache never fails a prompt: a prompt it cannot embed in time is a miss (``embedding_unavailable``), and a store
that cannot embed stores nothing.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Tier
from answer_cache.eligibility import BypassReason, cache_eligible
from answer_cache.guard import same_question
from answer_cache.index import index_key, process_index
from answer_cache.keys import CacheKeyParts, own_scope, partition_digest, shared_scope
from answer_cache.models import CacheEntry, CachePolicy, CacheSource
from answer_cache.selectors import cache_policy_for, entry_for_hit
from answer_cache.sync import index_catch_up
from core.errors import DomainError
from core.redis_client import get_redis
from core.vector_index import IndexedRow, pack, to_unit, unpack
from deployments.embeddings import embed
from deployments.models import DeploymentKind, DeploymentStatus, ModelDeployment
from deployments.selection import resolve_model

log = logging.getLogger(__name__)

CANDIDATES = 4
"""Nearest entries checked per scope: more than one, so an entry deleted since the index saw it does not hide the
next best."""
FINISH_STOP = "stop"


@dataclass(frozen=True)
class CacheHit:
    """A cached answer for the prompt: what the run serves instead of generating, and what it records."""

    entry_id: int
    answer: str
    similarity: float
    source: CacheSource
    """``own`` (the user's entry) or ``shared`` (another user of the tier, which opted in)."""
    source_run_id: int | None
    """The run that generated the answer, when the store named it."""
    input_tokens: int
    output_tokens: int
    """The original run's token counts: what the engine did not spend this time."""
    cached_prompt: str


@dataclass(frozen=True)
class CacheLookup:
    """The outcome of :func:`cache_lookup`: a hit, a miss (with the prompt's embedding, for :func:`cache_store`), or
    a bypass (``bypass`` says why; nothing was embedded unless the reason is ``embedding_unavailable``)."""

    hit: CacheHit | None = None
    bypass: BypassReason | None = None
    embedding: list[float] | None = None
    embedding_model: str = ""
    """The embedding deployment's ``name@version`` the vector came from."""
    embed_ms: float = 0.0
    """Time spent embedding the prompt (the call to the embedding worker)."""
    lookup_ms: float = 0.0
    """Time spent in the index and on the row check (catching up with Postgres included)."""

    @property
    def added_ms(self) -> float:
        """What the cache added before the run was queued."""
        return self.embed_ms + self.lookup_ms


def _scopes(*, user_id: int, tier: Tier, policy: CachePolicy, parts: CacheKeyParts) -> list[tuple[str, CacheSource]]:
    """The scopes this prompt may be answered from: the user's own, and the tier's shared one when the tier opted in
    and the prompt carries nothing of the user's (no history, no own system prompt, no memory)."""
    scopes = [(own_scope(user_id), CacheSource.OWN)]
    if policy.shared_scope and parts.shareable:
        scopes.append((shared_scope(tier.pk), CacheSource.SHARED))
    return scopes


def _store_scope(*, user_id: int, tier: Tier, policy: CachePolicy, parts: CacheKeyParts) -> str:
    return shared_scope(tier.pk) if policy.shared_scope and parts.shareable else own_scope(user_id)


def _embed_prompt(prompt: str, embedded: tuple[list[float], str] | None = None) -> tuple[list[float], str]:
    """The prompt's vector from the configured embedding deployment, and that deployment's ``name@version``;
    :class:`DomainError` (no such deployment, no worker, no answer in ``ANSWER_CACHE_EMBED_TIMEOUT_S``).
    ``embedded``: the prompt's vector from another pass (memory), used when it came from the same deployment."""
    config = settings.ANSWER_CACHE
    embedder = resolve_model(config.embedding_model, kind=DeploymentKind.EMBED)
    if embedded is not None and embedded[1] == embedder.key:
        return embedded
    [vector] = embed([prompt], embedder, timeout_s=config.embed_timeout_s)
    return vector, embedder.key


def cache_lookup(
    *,
    user_id: int,
    tier: Tier,
    parts: CacheKeyParts,
    prompt: str,
    policy: CachePolicy | None = None,
    embedded: tuple[list[float], str] | None = None,
) -> CacheLookup:
    """Looks the prompt up: one call to the embedding deployment, then the partition's nearest entries in the
    user's scope (and the tier's shared one, when allowed), each checked against its row and the lexical guard
    (``answer_cache.guard``), the best one at or above the tier's threshold answering. A hit counts on its entry
    (``hits``, ``last_hit_at``). ``policy``: the tier's, when the caller holds it already; ``embedded``: the prompt's
    vector and its model when another pass embedded it already (not embedded again when the model is the same)."""
    policy = policy or cache_policy_for(tier=tier)
    reason = cache_eligible(policy=policy, parts=parts, prompt=prompt)
    if reason is not None:
        return CacheLookup(bypass=reason)
    started = time.perf_counter()
    try:
        vector, embedding_model = _embed_prompt(prompt, embedded)
    except DomainError as exc:
        log.warning("answer cache: the prompt was not embedded (%s)", exc)
        return CacheLookup(bypass=BypassReason.EMBEDDING_UNAVAILABLE, embed_ms=(time.perf_counter() - started) * 1000)
    embedded_at = time.perf_counter()
    hit = _search(
        user_id=user_id,
        tier=tier,
        policy=policy,
        parts=parts,
        prompt=prompt,
        query=vector,
        partition=partition_digest(parts, embedding_model=embedding_model),
    )
    done = time.perf_counter()
    return CacheLookup(
        hit=hit,
        embedding=vector,
        embedding_model=embedding_model,
        embed_ms=(embedded_at - started) * 1000,
        lookup_ms=(done - embedded_at) * 1000,
    )


def _search(
    *,
    user_id: int,
    tier: Tier,
    policy: CachePolicy,
    parts: CacheKeyParts,
    prompt: str,
    query: list[float],
    partition: str,
) -> CacheHit | None:
    index = process_index()
    index_catch_up(index)
    unit = to_unit(query)
    candidates: list[tuple[float, int, str, CacheSource]] = []
    for scope, source in _scopes(user_id=user_id, tier=tier, policy=policy, parts=parts):
        for entry_id, similarity in index.search(index_key(scope, partition), unit, CANDIDATES):
            if similarity >= policy.threshold:
                candidates.append((similarity, entry_id, scope, source))
    now = timezone.now()
    for similarity, entry_id, scope, source in sorted(candidates, key=lambda c: (-c[0], c[1])):
        row = entry_for_hit(
            entry_id=entry_id,
            scope=scope,
            partition=partition,
            user_id=user_id if source == CacheSource.OWN else None,
            now=now,
        )
        if row is None:
            index.discard([entry_id])  # deleted, expired or retired since this process indexed it
            continue
        if not same_question(row.prompt, prompt):
            continue  # alike to the embedding, but another number or the same words swapped (answer_cache.guard)
        CacheEntry.objects.filter(pk=row.pk).update(hits=F("hits") + 1, last_hit_at=now)
        return CacheHit(
            entry_id=row.pk,
            answer=row.answer,
            similarity=min(1.0, similarity),
            source=source,
            source_run_id=row.source_run_id,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cached_prompt=row.prompt,
        )
    return None


def cache_store(
    *,
    user_id: int,
    tier: Tier,
    parts: CacheKeyParts,
    prompt: str,
    answer: str,
    finish_reason: str,
    input_tokens: int,
    output_tokens: int,
    embedding: list[float] | None = None,
    embedding_model: str = "",
    source_run_id: int | None = None,
) -> CacheEntry | None:
    """Stores the answer of an eligible run that finished with ``stop`` (anything else stores nothing: a cut or
    cancelled answer is not the answer). ``embedding`` and ``embedding_model`` are the lookup's
    (:attr:`CacheLookup.embedding`, or :func:`cache_take_embedding` in another process), so a miss is embedded once;
    without them the prompt is embedded here. The scope is the tier's shared one when it opted in and the prompt is
    shareable, else the user's own. Returns the entry, or None when nothing was stored."""
    policy = cache_policy_for(tier=tier)
    if finish_reason != FINISH_STOP or not answer.strip():
        return None
    if cache_eligible(policy=policy, parts=parts, prompt=prompt) is not None:
        return None
    if embedding is None or not embedding_model:
        try:
            embedding, embedding_model = _embed_prompt(prompt)
        except DomainError as exc:
            log.warning("answer cache: the answer was not stored, its prompt was not embedded (%s)", exc)
            return None
    if not ModelDeployment.objects.filter(pk=parts.deployment_id).exclude(status=DeploymentStatus.RETIRED).exists():
        return None
    scope = _store_scope(user_id=user_id, tier=tier, policy=policy, parts=parts)
    partition = partition_digest(parts, embedding_model=embedding_model)
    vector = to_unit(embedding)
    entry = CacheEntry.objects.create(
        user_id=user_id,
        scope=scope,
        partition=partition,
        deployment_id=parts.deployment_id,
        deployment_key=parts.deployment_key,
        embedding_model=embedding_model,
        prompt=prompt,
        answer=answer,
        input_tokens=max(0, input_tokens),
        output_tokens=max(0, output_tokens),
        embedding=pack(vector),
        source_run_id=source_run_id,
        expires_at=timezone.now() + timedelta(seconds=policy.ttl_s),
    )
    row = IndexedRow(id=entry.pk, index_key=index_key(scope, partition), vector=vector)
    transaction.on_commit(lambda: process_index().add([row]))
    return entry


def embedding_stash_key(run_id: int) -> str:
    """Where a missed prompt's embedding waits for the run's end (the ACL file names its pattern)."""
    return f"answer_cache:embedding:{run_id}"


def cache_stash_embedding(*, run_id: int, lookup: CacheLookup) -> None:
    """Keeps a missed prompt's embedding for the run's end (``ANSWER_CACHE_STASH_TTL_S``), when the store happens
    in another process (the worker): :func:`cache_take_embedding` reads it there. Nothing for a hit or a bypass."""
    if lookup.hit is not None or lookup.embedding is None:
        return
    payload = json.dumps({"model": lookup.embedding_model, "vector": pack(to_unit(lookup.embedding)).hex()})
    get_redis().set(embedding_stash_key(run_id), payload, ex=settings.ANSWER_CACHE.stash_ttl_s)


def cache_take_embedding(*, run_id: int) -> tuple[list[float], str] | None:
    """The embedding :func:`cache_stash_embedding` kept for the run, and its model (removed as it is read)."""
    raw = get_redis().getdel(embedding_stash_key(run_id))
    if raw is None:
        return None
    data = json.loads(raw)
    return [float(x) for x in unpack(bytes.fromhex(data["vector"]))], str(data["model"])


@dataclass(frozen=True)
class PurgeResult:
    expired: int
    retired: int


def cache_purge(*, now: datetime | None = None) -> PurgeResult:
    """Deletes the expired entries and those of retired deployments (``manage.py purge_answer_cache``, on a
    schedule). Processes drop them from their indexes at their next reconcile; until then a hit's row check
    refuses them."""
    now = now or timezone.now()
    expired, _ = CacheEntry.objects.filter(expires_at__lte=now).delete()
    retired, _ = CacheEntry.objects.filter(deployment__status=DeploymentStatus.RETIRED).delete()
    return PurgeResult(expired=expired, retired=retired)


def cache_forget_deployments(*, deployment_ids: list[int]) -> int:
    """Deletes every entry of these deployments (call it when they are retired); returns how many."""
    if not deployment_ids:
        return 0
    deleted, _ = CacheEntry.objects.filter(deployment_id__in=deployment_ids).delete()
    return deleted
