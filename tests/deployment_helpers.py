"""Deployments in tests: the default one ready with a worker listed, and more versions side by side."""

from __future__ import annotations

import time
from typing import Any

from core.redis_client import get_redis
from deployments.defaults import seed_default_deployment
from deployments.models import DeploymentStatus, ModelDeployment
from deployments.selection import forget_cached
from generation.worker_contract import deployment_ready_key

TEST_WORKER = "test-worker@deployments"
"""The worker name the fixtures list as ready (no process behind it: the tests that need one start it)."""


def mark_ready_worker(key: str, *, worker: str = TEST_WORKER, ttl_s: float = 3600.0) -> None:
    get_redis().zadd(deployment_ready_key(key), {worker: time.time() + ttl_s})
    forget_cached()


def no_ready_worker(key: str) -> None:
    get_redis().delete(deployment_ready_key(key))
    forget_cached()


DEFAULT_DEPLOYMENT_ID = 1
"""The migration's row is the first one; a transactional test's flush deletes it and the fixture puts it back with
the same id, so a live stack's web process (which caches the deployments for ``DEPLOYMENT_CACHE_S``) never writes
a run for an id that is gone."""


def ensure_default_deployment(*, mark_worker: bool = True) -> ModelDeployment:
    """The migration's default deployment, ``ready`` (as ``prepare_model`` leaves it), with a ready worker listed
    unless ``mark_worker`` is False (a live stack's own worker lists itself)."""
    row = ModelDeployment.objects.filter(is_default=True).first()
    if row is None:
        row = seed_default_deployment(ModelDeployment, status=DeploymentStatus.READY, pk=DEFAULT_DEPLOYMENT_ID)
    if row.status != DeploymentStatus.READY:
        row.status = DeploymentStatus.READY
        row.save(update_fields=["status"])
    if mark_worker:
        mark_ready_worker(row.key)
    forget_cached()
    return row


def add_version(
    version: str, *, weight: int = 0, status: str = DeploymentStatus.READY, worker: bool = True, **fields: Any
) -> ModelDeployment:
    """Another version of the default model's name, on the same local weights (as ``v2`` is in the engine tests)."""
    default = ModelDeployment.objects.get(is_default=True)
    row = ModelDeployment.objects.create(
        name=fields.pop("name", default.name),
        version=version,
        source_kind=default.source_kind,
        source_path=default.source_path,
        local_path=fields.pop("local_path", default.local_path),
        status=status,
        traffic_weight=weight,
        **fields,
    )
    if worker:
        mark_ready_worker(row.key)
    forget_cached()
    return row
