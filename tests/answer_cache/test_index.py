"""The vector index: exact search below the graph size, HNSW above, removal; and how a process's index follows the
rows other processes write (two :class:`SemanticIndex` instances stand for two web processes)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from answer_cache.index import index_key
from answer_cache.keys import own_scope
from answer_cache.models import CacheEntry
from answer_cache.sync import index_catch_up
from core.vector_index import IndexedRow, PartitionIndex, SemanticIndex, pack, to_unit
from tests.answer_cache.helpers import chat_deployment, near, unit_vector
from tests.factories import UserFactory


def test_a_partition_turns_into_an_hnsw_graph_at_its_threshold_and_finds_the_same_neighbours() -> None:
    partition = PartitionIndex(384, hnsw_min=8)
    vectors = [to_unit(unit_vector(i)) for i in range(20)]
    for i, vector in enumerate(vectors[:7]):
        partition.add(i + 100, vector)
    assert not partition.is_graph
    assert partition.search(vectors[3], 1)[0][0] == 103
    for i, vector in enumerate(vectors[7:], start=7):
        partition.add(i + 100, vector)
    assert partition.is_graph and len(partition) == 20
    key, similarity = partition.search(vectors[15], 1)[0]
    assert key == 115 and similarity == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("hnsw_min", [2, 1000])
def test_similarity_is_the_cosine_and_removal_hides_an_entry(hnsw_min: int) -> None:
    partition = PartitionIndex(384, hnsw_min=hnsw_min)
    base = unit_vector(1)
    partition.add(1, to_unit(base))
    partition.add(2, to_unit(near(base, 0.8)))
    partition.add(3, to_unit(unit_vector(3)))
    found = partition.search(to_unit(near(base, 0.95, seed=5)), 3)
    assert found[0][0] == 1 and found[0][1] == pytest.approx(0.95, abs=1e-4)
    partition.remove(1)
    assert partition.search(to_unit(base), 3)[0][0] == 2


def test_partitions_never_mix() -> None:
    index = SemanticIndex(hnsw_min=4)
    vector = to_unit(unit_vector(1))
    index.add([IndexedRow(id=1, index_key="user:1|p", vector=vector)])
    assert index.search("user:2|p", vector, 4) == []
    assert index.search("user:1|q", vector, 4) == []
    assert [k for k, _ in index.search("user:1|p", vector, 4)] == [1]


def _entry(user: Any, vector: list[float], **fields: Any) -> CacheEntry:
    deployment = chat_deployment()
    return CacheEntry.objects.create(
        user=user,
        scope=own_scope(user.pk),
        partition="p" * 64,
        deployment=deployment,
        deployment_key=deployment.key,
        embedding_model="emb@v1",
        prompt="q",
        answer="a",
        embedding=pack(np.asarray(vector, dtype=np.float32)),
        expires_at=fields.pop("expires_at", timezone.now() + timedelta(hours=1)),
        **fields,
    )


@pytest.mark.django_db
def test_another_process_catches_up_with_new_rows_and_drops_deleted_and_expired_ones(settings: Any) -> None:
    user = UserFactory.create()
    key = index_key(own_scope(user.pk), "p" * 64)
    first = _entry(user, unit_vector(1))
    process_b = SemanticIndex(hnsw_min=64)
    assert index_catch_up(process_b) == 1 and first.pk in process_b
    second = _entry(user, unit_vector(2))
    assert index_catch_up(process_b) == 1 and second.pk in process_b
    assert index_catch_up(process_b) == 0  # the overlap rereads recent rows but adds none twice

    first.delete()
    CacheEntry.objects.filter(pk=second.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    settings.ANSWER_CACHE = dataclasses.replace(settings.ANSWER_CACHE, reconcile_s=0)
    index_catch_up(process_b)
    assert first.pk not in process_b and second.pk not in process_b
    assert process_b.search(key, to_unit(unit_vector(1)), 4) == []


@pytest.mark.django_db
def test_a_row_committed_after_a_higher_id_is_still_read_within_the_overlap() -> None:
    user = UserFactory.create()
    low = _entry(user, unit_vector(1))
    high = _entry(user, unit_vector(2))
    process_b = SemanticIndex(hnsw_min=64)
    process_b.add([IndexedRow(id=high.pk, index_key="x|y", vector=to_unit(unit_vector(2)))])
    assert process_b.watermark == high.pk  # `low` is below the watermark, as a late commit would be
    index_catch_up(process_b)
    assert low.pk in process_b


@pytest.mark.django_db
def test_catch_up_waits_for_its_interval() -> None:
    user = UserFactory.create()
    process_b = SemanticIndex(hnsw_min=64, sync_ms=60_000)
    index_catch_up(process_b)
    late = _entry(user, unit_vector(1))
    assert index_catch_up(process_b) == 0 and late.pk not in process_b
    assert index_catch_up(process_b, force=True) == 1
