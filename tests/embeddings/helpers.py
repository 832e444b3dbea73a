"""The default embedding deployment in tests, and the reference embeddings vectors are compared with."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from django.conf import settings

from deployments.defaults import default_embedding_fields
from deployments.model_files import prepare_embedding_model
from deployments.models import DeploymentStatus, ModelDeployment
from deployments.selection import forget_cached

EMBEDDING_DEPLOYMENT_ID = 900
"""A fixed id, so the row a transactional test's flush removes comes back as the same deployment."""
SENTENCES = [
    "The capital of France is Paris.",
    "A man is playing a guitar on the street.",
    "Embeddings map sentences to vectors.",
    "Quantum computers use qubits.",
    "I had pancakes for breakfast this morning, with maple syrup and a strong black coffee.",
]


def ensure_embedding_deployment() -> ModelDeployment:
    """The packaged all-MiniLM-L6-v2 deployment, ``ready`` on its unpacked folder (as ``prepare_model`` leaves it)."""
    fields = default_embedding_fields()
    prepare_embedding_model(Path(fields["local_path"]))
    row = ModelDeployment.objects.filter(name=fields["name"], version=fields["version"]).first()
    if row is None:
        row = ModelDeployment.objects.create(pk=EMBEDDING_DEPLOYMENT_ID, status=DeploymentStatus.READY, **fields)
    if row.status != DeploymentStatus.READY:
        row.status = DeploymentStatus.READY
        row.save(update_fields=["status"])
    forget_cached()
    return row


def embedding_deployment_state() -> str | None:
    """The packaged embedding deployment's status now (None: no row), for :func:`restore_embedding_deployment`."""
    fields = default_embedding_fields()
    row = ModelDeployment.objects.filter(name=fields["name"], version=fields["version"]).first()
    return row.status if row is not None else None


def restore_embedding_deployment(state: str | None) -> None:
    """Puts the packaged embedding deployment back as it was before a package's tests made it ``ready`` in committed
    rows (``state``: :func:`embedding_deployment_state` then), so later tests of other packages (the model listings)
    see the database as they would have."""
    fields = default_embedding_fields()
    rows = ModelDeployment.objects.filter(name=fields["name"], version=fields["version"])
    if state is None:
        rows.delete()
    else:
        rows.update(status=state)
    forget_cached()


def model_folder() -> Path:
    return Path(settings.ENGINE.model_cache_dir) / default_embedding_fields()["name"]


@functools.cache
def reference_vectors(texts: tuple[str, ...]) -> list[list[float]]:
    """all-MiniLM-L6-v2 as its model card computes it: the tokenizer pads and truncates at 256, the mean of the
    token states under the attention mask, L2-normalized (plain transformers, in this process)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_folder()))
    model = AutoModel.from_pretrained(str(model_folder()))
    encoded = tokenizer(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        states = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    vectors: list[list[float]] = torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()
    return vectors


def reference_tokens(texts: list[str]) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_folder()))
    return sum(len(ids) for ids in tokenizer(texts)["input_ids"])


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
