"""Lookup and store through the real embedding worker: a paraphrase is served from the cache, and no entry ever
crosses users outside a tier's shared scope (the authorization tests)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Tier, User
from answer_cache.eligibility import BypassReason
from answer_cache.index import process_index
from answer_cache.keys import CacheKeyParts
from answer_cache.models import CacheEntry, CachePolicy, CacheSource
from answer_cache.selectors import cache_policy_for
from answer_cache.services import (
    cache_forget_deployments,
    cache_lookup,
    cache_purge,
    cache_stash_embedding,
    cache_store,
    cache_take_embedding,
)
from deployments.models import DeploymentStatus
from generation.sampling import SamplingSpec
from tests.answer_cache.helpers import chat_deployment, parts
from tests.deployment_helpers import no_ready_worker
from tests.factories import UserFactory

pytestmark = pytest.mark.usefixtures("embedding_worker")

QUESTION = "What is the capital of France?"
PARAPHRASE = "What's the capital city of France?"
ANSWER = "The capital of France is Paris."


def store(user: User, key: CacheKeyParts | None = None, prompt: str = QUESTION, **fields: Any) -> CacheEntry | None:
    return cache_store(
        user_id=user.pk,
        tier=user.tier,
        parts=key or parts(),
        prompt=prompt,
        answer=fields.pop("answer", ANSWER),
        finish_reason=fields.pop("finish_reason", "stop"),
        input_tokens=30,
        output_tokens=8,
        **fields,
    )


def lookup(user: User, key: CacheKeyParts | None = None, prompt: str = PARAPHRASE) -> Any:
    return cache_lookup(user_id=user.pk, tier=user.tier, parts=key or parts(), prompt=prompt)


def share(tier_name: str) -> None:
    CachePolicy.objects.update_or_create(tier=Tier.objects.get(name=tier_name), defaults={"shared_scope": True})


@pytest.mark.django_db
def test_a_paraphrase_is_served_from_the_users_own_entry() -> None:
    user = UserFactory.create()
    miss = lookup(user, prompt=QUESTION)
    assert miss.hit is None and miss.bypass is None and len(miss.embedding) == 384
    assert miss.embedding_model == "all-MiniLM-L6-v2@v1" and miss.embed_ms > 0
    entry = store(user, embedding=miss.embedding, embedding_model=miss.embedding_model, source_run_id=41)
    assert entry is not None and entry.scope == f"user:{user.pk}"

    found = lookup(user)
    assert found.hit is not None
    assert found.hit.answer == ANSWER and found.hit.source == CacheSource.OWN
    assert found.hit.entry_id == entry.pk and found.hit.source_run_id == 41
    assert 0.9 <= found.hit.similarity <= 1.0
    assert (found.hit.input_tokens, found.hit.output_tokens) == (30, 8)
    entry.refresh_from_db()
    assert entry.hits == 1 and entry.last_hit_at is not None


@pytest.mark.django_db
def test_a_different_question_sharing_words_is_a_miss() -> None:
    user = UserFactory.create()
    store(user)
    assert lookup(user, prompt="What is the capital of Germany?").hit is None


@pytest.mark.django_db
def test_another_users_identical_prompt_is_not_served_without_the_tiers_opt_in() -> None:
    owner, other = UserFactory.create(), UserFactory.create()
    store(owner)
    assert lookup(other, prompt=QUESTION).hit is None
    assert lookup(owner, prompt=QUESTION).hit is not None


@pytest.mark.django_db
def test_a_shared_tier_serves_its_users_but_never_another_tiers() -> None:
    share("free")
    owner, colleague = UserFactory.create(), UserFactory.create()
    outsider = UserFactory.with_tier("plus")
    entry = store(owner)
    assert entry is not None and entry.scope == f"tier:{owner.tier.pk}"
    found = lookup(colleague, prompt=QUESTION)
    assert found.hit is not None and found.hit.source == CacheSource.SHARED
    assert lookup(outsider, prompt=QUESTION).hit is None
    share("plus")  # even a tier that shares too has a scope of its own
    assert lookup(outsider, prompt=QUESTION).hit is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "private",
    [
        {"history": (("user", "Hi"), ("assistant", "Hello!"))},
        {"user_system_prompt": True},
        {"user_context": True},
    ],
)
def test_prompts_with_history_or_the_users_own_context_stay_private_in_a_shared_tier(
    private: dict[str, Any],
) -> None:
    share("free")
    owner, colleague = UserFactory.create(), UserFactory.create()
    key = parts(**private)
    entry = store(owner, key)
    assert entry is not None and entry.scope == f"user:{owner.pk}"
    assert lookup(colleague, key, prompt=QUESTION).hit is None
    assert lookup(owner, key, prompt=QUESTION).hit is not None


@pytest.mark.django_db
def test_turning_the_shared_scope_off_stops_serving_shared_entries() -> None:
    share("free")
    owner, colleague = UserFactory.create(), UserFactory.create()
    store(owner)
    assert lookup(colleague, prompt=QUESTION).hit is not None
    CachePolicy.objects.filter(tier=owner.tier).update(shared_scope=False)
    assert lookup(colleague, prompt=QUESTION).hit is None


@pytest.mark.django_db
def test_another_partition_is_a_miss() -> None:
    user = UserFactory.create()
    store(user)
    assert lookup(user, parts(system_prompt="Answer in French."), prompt=QUESTION).hit is None
    assert lookup(user, parts(max_tokens=16), prompt=QUESTION).hit is None
    json_only = parts(sampling=SamplingSpec(temperature=0.0, structured_outputs={"json_object": True}))
    assert lookup(user, json_only, prompt=QUESTION).hit is None


@pytest.mark.django_db
def test_an_entry_deleted_expired_or_retired_is_refused_by_its_row_even_while_the_index_holds_it() -> None:
    user = UserFactory.create()
    entry = store(user)
    assert entry is not None
    assert lookup(user).hit is not None  # indexed
    CacheEntry.objects.filter(pk=entry.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert lookup(user).hit is None
    assert entry.pk not in process_index()

    fresh = store(user)
    assert fresh is not None and lookup(user).hit is not None
    deployment = chat_deployment()
    deployment.status = DeploymentStatus.RETIRED
    deployment.save(update_fields=["status"])
    assert lookup(user).hit is None


@pytest.mark.django_db
def test_only_a_stopped_answer_of_an_eligible_prompt_is_stored() -> None:
    user = UserFactory.create()
    assert store(user, finish_reason="length") is None
    assert store(user, finish_reason="stop", answer="  ") is None
    assert store(user, parts(sampling=SamplingSpec(temperature=0.0, seed=3))) is None
    assert store(user, parts(n=2)) is None
    assert not CacheEntry.objects.exists()


@pytest.mark.django_db
def test_a_sampled_prompt_bypasses_unless_the_tier_opted_in() -> None:
    user = UserFactory.create()
    sampled = parts(temperature=0.7)
    assert lookup(user, sampled).bypass == BypassReason.SAMPLED
    assert store(user, sampled) is None
    CachePolicy.objects.filter(tier=user.tier).update(allow_sampled=True)
    assert store(user, sampled) is not None
    assert lookup(user, sampled).hit is not None


@pytest.mark.django_db
def test_a_bypass_embeds_nothing_and_a_missing_embedder_is_a_miss_not_an_error() -> None:
    user = UserFactory.create()
    tools = lookup(user, parts(tools=[{"type": "function", "function": {"name": "f"}}]))
    assert tools.bypass == BypassReason.TOOLS and tools.embedding is None and tools.embed_ms == 0
    no_ready_worker("all-MiniLM-L6-v2@v1")
    down = lookup(user)
    assert down.hit is None and down.bypass == BypassReason.EMBEDDING_UNAVAILABLE


@pytest.mark.django_db
def test_the_stashed_embedding_lets_another_process_store_without_embedding_again() -> None:
    user = UserFactory.create()
    miss = lookup(user, prompt=QUESTION)
    cache_stash_embedding(run_id=7, lookup=miss)
    taken = cache_take_embedding(run_id=7)
    assert taken is not None and taken[1] == miss.embedding_model
    assert taken[0] == pytest.approx(miss.embedding, abs=1e-6)
    assert cache_take_embedding(run_id=7) is None
    no_ready_worker("all-MiniLM-L6-v2@v1")  # no embedding call may happen now
    assert store(user, embedding=taken[0], embedding_model=taken[1]) is not None


@pytest.mark.django_db
def test_purge_deletes_expired_entries_and_those_of_retired_versions(settings: Any) -> None:
    user = UserFactory.create()
    old = store(user)
    keep = store(user, prompt="How tall is Mount Everest?")
    assert old is not None and keep is not None
    CacheEntry.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    result = cache_purge()
    assert (result.expired, result.retired) == (1, 0)
    assert list(CacheEntry.objects.values_list("pk", flat=True)) == [keep.pk]
    assert cache_forget_deployments(deployment_ids=[chat_deployment().pk]) == 1
    assert not CacheEntry.objects.exists()


@pytest.mark.django_db
def test_the_tiers_ttl_sets_the_expiry() -> None:
    user = UserFactory.create()
    CachePolicy.objects.filter(tier=user.tier).update(ttl_s=60)
    entry = store(user)
    assert entry is not None
    assert timedelta(seconds=55) < entry.expires_at - entry.created_at <= timedelta(seconds=61)


@pytest.mark.django_db
def test_every_tier_has_a_private_policy_and_a_tier_without_a_row_gets_the_same_defaults() -> None:
    assert set(CachePolicy.objects.values_list("tier__name", flat=True)) >= {"free", "plus", "pro", "batch"}
    assert not CachePolicy.objects.filter(shared_scope=True).exists()
    tier = Tier.objects.get(name="free")
    CachePolicy.objects.filter(tier=tier).delete()
    policy = cache_policy_for(tier=tier)
    assert policy.pk is None and policy.enabled and not policy.shared_scope and not policy.allow_sampled


@pytest.mark.django_db
def test_a_near_identical_prompt_with_the_roles_swapped_is_a_miss() -> None:
    user = UserFactory.create()
    store(user, prompt="Convert 10 miles to kilometers.", answer="16.09 km.")
    assert lookup(user, prompt="Convert 10 kilometers to miles.").hit is None
    assert lookup(user, prompt="Convert 10 miles into kilometers.").hit is not None
