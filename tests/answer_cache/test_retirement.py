"""Retiring a deployment version (``rollouts.retirement``) deletes its cached answers; the other versions' stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from answer_cache.models import CacheEntry
from answer_cache.services import cache_store
from deployments.models import DeploymentStatus, ModelDeployment
from rollouts.retirement import retire_idle_deployments
from tests.answer_cache.helpers import parts, unit_vector
from tests.deployment_helpers import add_version
from tests.factories import UserFactory


@pytest.mark.django_db
def test_retiring_a_version_deletes_its_entries() -> None:
    long_ago = timezone.now() - timedelta(days=3)
    old = add_version("v-old", status=DeploymentStatus.DRAINING, drained_at=long_ago)
    new = add_version("v-new", weight=100)
    ModelDeployment.objects.filter(pk=old.pk).update(created_at=long_ago)
    user = UserFactory.create()
    for deployment in (old, new):
        cache_store(
            user_id=user.pk,
            tier=user.tier,
            parts=parts(deployment),
            prompt="What is the capital of France?",
            answer="Paris.",
            finish_reason="stop",
            input_tokens=20,
            output_tokens=3,
            embedding=unit_vector(1),
            embedding_model="all-MiniLM-L6-v2@v1",
        )
    assert CacheEntry.objects.count() == 2

    retired = retire_idle_deployments(idle_s=3600)

    assert [row.pk for row in retired] == [old.pk]
    assert list(CacheEntry.objects.values_list("deployment_id", flat=True)) == [new.pk]


@pytest.mark.django_db
def test_nothing_is_stored_for_a_retired_version() -> None:
    retired = add_version("v-gone", status=DeploymentStatus.RETIRED)
    user = UserFactory.create()
    entry = cache_store(
        user_id=user.pk,
        tier=user.tier,
        parts=parts(retired),
        prompt="What is the capital of France?",
        answer="Paris.",
        finish_reason="stop",
        input_tokens=20,
        output_tokens=3,
        embedding=unit_vector(1),
        embedding_model="all-MiniLM-L6-v2@v1",
    )
    assert entry is None
