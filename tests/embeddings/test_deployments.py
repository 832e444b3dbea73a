"""Embedding deployments: registered, materialized and verified (a probe sentence embedded) like any other, and
never selected for the other kind of request."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deployments.embedding_model import EmbeddingModel, read_spec
from deployments.models import DeploymentKind, DeploymentStatus, ModelDeployment
from deployments.registration import RegistrationError, register_deployment
from deployments.selection import ModelNotFound, WrongModelKind, check_model, resolve_model
from tests.deployment_helpers import mark_ready_worker
from tests.embeddings.helpers import SENTENCES, cosine, model_folder, reference_vectors

pytestmark = pytest.mark.django_db


def test_the_packaged_model_reads_as_384_dimensions_256_tokens_mean_pooled_and_normalized() -> None:
    spec = read_spec(model_folder())
    assert (spec.dimensions, spec.max_tokens, spec.pooling, spec.normalize) == (384, 256, "mean_tokens", True)


def test_the_runtime_matches_the_reference_in_one_padded_batch() -> None:
    model = EmbeddingModel(model_folder(), threads=1)
    vectors = model.embed([model.tokenize(text) for text in SENTENCES])
    for got, want in zip(vectors, reference_vectors(tuple(SENTENCES)), strict=True):
        assert cosine(got, want) > 1 - 1e-4


def test_an_embedding_folder_registers_materializes_and_verifies(tmp_path: Path) -> None:
    source = tmp_path / "minilm"
    shutil.copytree(model_folder(), source)
    row = register_deployment(
        name="minilm-copy", version="v1", source_kind="hf_folder", source_path=str(source), kind=DeploymentKind.EMBED
    )
    assert (row.status, row.kind, len(row.checksum)) == (DeploymentStatus.READY, "embed", 64)
    assert Path(row.local_path).is_dir() and Path(row.local_path) != source


def test_an_embedding_folder_whose_weights_do_not_load_fails(tmp_path: Path) -> None:
    source = tmp_path / "broken"
    shutil.copytree(model_folder(), source)
    (source / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(RegistrationError):
        register_deployment(
            name="minilm-broken", version="v1", source_kind="hf_folder", source_path=str(source), kind="embed"
        )
    row = ModelDeployment.objects.get(name="minilm-broken")
    assert row.status == DeploymentStatus.FAILED and row.status_reason


def test_a_name_keeps_one_kind_and_an_embedding_model_is_never_the_default(tmp_path: Path) -> None:
    default = ModelDeployment.objects.get(is_default=True)
    with pytest.raises(RegistrationError, match="one kind"):
        register_deployment(
            name=default.name, version="v9", source_kind="path", source_path=str(tmp_path), kind="embed"
        )
    with pytest.raises(RegistrationError, match="default"):
        register_deployment(name="e", version="v1", source_kind="packaged", kind="embed", make_default=True)
    assert not ModelDeployment.objects.filter(version="v9").exists()
    assert not ModelDeployment.objects.filter(name="e").exists()


def test_selection_routes_each_kind_only_to_its_own_deployments() -> None:
    embedding = ModelDeployment.objects.get(kind=DeploymentKind.EMBED)
    chat = ModelDeployment.objects.get(is_default=True)
    mark_ready_worker(embedding.key)
    assert resolve_model(embedding.name, kind=DeploymentKind.EMBED).key == embedding.key
    assert resolve_model(embedding.key, kind=DeploymentKind.EMBED).key == embedding.key
    for spec in (embedding.name, embedding.key):
        with pytest.raises(WrongModelKind, match="an embedding model"):
            resolve_model(spec)
        with pytest.raises(WrongModelKind):
            check_model(spec)  # a chat's model
    with pytest.raises(WrongModelKind, match="a text-generation model"):
        resolve_model(chat.name, kind=DeploymentKind.EMBED)
    with pytest.raises(ModelNotFound):
        resolve_model("nothing-here", kind=DeploymentKind.EMBED)


def test_truncation_keeps_cls_and_sep_and_the_side_asked() -> None:
    from deployments.embeddings import tokenize
    from deployments.selection import Served

    served = Served(
        id=1,
        name="m",
        version="v1",
        status="ready",
        traffic_weight=1,
        is_default=False,
        local_path=str(model_folder()),
        kind="embed",
    )
    [right] = tokenize(["word " * 400], served, truncate_to=256)
    assert len(right) == 256 and right[0] == 101 and right[-1] == 102
    assert tokenize(["hello there"], served, truncate_to=3, truncation_side="left") == [[101, 2045, 102]]
    assert tokenize(["hello there"], served, truncate_to=3) == [[101, 7592, 102]]
