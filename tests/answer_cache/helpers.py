"""Key parts and vectors for the answer cache's tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from answer_cache.keys import CacheKeyParts
from deployments.models import ModelDeployment
from generation.sampling import SamplingSpec
from tests.deployment_helpers import DEFAULT_DEPLOYMENT_ID


def chat_deployment() -> ModelDeployment:
    return ModelDeployment.objects.get(pk=DEFAULT_DEPLOYMENT_ID)


def parts(deployment: ModelDeployment | None = None, *, temperature: float = 0.0, **fields: Any) -> CacheKeyParts:
    """Greedy, no history, the deployment's own system prompt: eligible and shareable unless ``fields`` say not."""
    deployment = deployment or chat_deployment()
    sampling = fields.pop("sampling", SamplingSpec(temperature=temperature))
    return CacheKeyParts(
        deployment_id=deployment.pk,
        deployment_key=deployment.key,
        sampling=sampling,
        max_tokens=fields.pop("max_tokens", 256),
        system_prompt=fields.pop("system_prompt", "You are a helpful assistant."),
        **fields,
    )


def unit_vector(seed: int, dim: int = 384) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def near(vector: list[float], similarity: float, seed: int = 99) -> list[float]:
    """A unit vector at exactly ``similarity`` (cosine) from ``vector``."""
    base = np.asarray(vector, dtype=np.float64)
    other = np.random.default_rng(seed).standard_normal(len(vector))
    other -= other.dot(base) * base
    other /= np.linalg.norm(other)
    mixed = similarity * base + np.sqrt(1 - similarity**2) * other
    return [float(x) for x in mixed]
