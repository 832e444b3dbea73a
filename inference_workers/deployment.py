"""The one deployment this worker process serves (``WORKER_DEPLOYMENT``, else the default deployment).

At boot the worker reads it from Postgres, builds its engine from the materialized copy (``local_path``; with
``MODEL_CACHE_MODE=per_host``, this host's own copy, filled from the model store and checksum-verified first when it
is missing: ``deployments.host_cache``) with the deployment's engine arguments, and consumes only that
deployment's tier queues (``pro.name@version``...). While it runs it re-reads the deployment's status every
``DEPLOYMENT_STATUS_CHECK_S``: a ``draining`` (or ``retired``) deployment makes it report ``draining``, then
``drained`` once it has no runs.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

from core.config import EngineConfig
from deployments.defaults import DEFAULT_VERSION
from deployments.host_cache import PER_HOST, HostCacheError, Reporter, host_copy
from deployments.models import DeploymentStatus, ModelDeployment, deployment_key
from generation.worker_contract import WorkerState
from runs.models import ACTIVE_STATUSES, Run

logger = logging.getLogger(__name__)

SERVABLE = (DeploymentStatus.READY, DeploymentStatus.DRAINING)
"""A worker starts only for a deployment in one of these (a draining one still finishes its runs)."""


class DeploymentNotServable(RuntimeError):
    """The worker cannot serve what it was told to: it refuses to start, saying why."""


class HostCopyUnavailable(DeploymentNotServable):
    """This host has no verified copy of the deployment's weights (per-host cache): reported ``failed`` already."""


@dataclass(frozen=True)
class WorkerDeployment:
    name: str
    version: str
    local_path: str
    engine_args: dict[str, Any]
    is_default: bool

    @property
    def key(self) -> str:
        return deployment_key(self.name, self.version)


def _from_row(row: ModelDeployment, *, worker: str) -> WorkerDeployment:
    local_path = row.local_path or settings.ENGINE.model_path
    if settings.MODEL_STORE.cache_mode == PER_HOST:
        try:
            local_path = str(
                host_copy(
                    name=row.name,
                    version=row.version,
                    source_kind=row.source_kind,
                    source_path=row.source_path,
                    local_path=local_path,
                    checksum=row.checksum,
                    worker=worker,
                )
            )
        except HostCacheError as exc:
            raise HostCopyUnavailable(exc.message) from exc
    return WorkerDeployment(
        name=row.name,
        version=row.version,
        local_path=local_path,
        engine_args=dict(row.engine_args or {}),
        is_default=row.is_default,
    )


def find_worker_deployment(wanted: str, *, worker: str = "") -> WorkerDeployment:
    """The deployment ``wanted`` (``name@version``; empty: the default one) as this worker will serve it; with a
    per-host cache, its copy on this host is filled and verified first (progress reported as ``worker``).

    Without a default row (a database flushed by a test between two modules) the default model of the settings
    is served as ``v1``, which is what the migration makes of it."""
    if wanted:
        name, _, version = wanted.partition("@")
        row = ModelDeployment.objects.filter(name=name, version=version).first()
        if row is None:
            raise DeploymentNotServable(
                f"WORKER_DEPLOYMENT={wanted!r} is not registered (register it: manage.py deployment_register)"
            )
    else:
        row = ModelDeployment.objects.filter(is_default=True).first()
        if row is None:
            engine = settings.ENGINE
            return WorkerDeployment(engine.served_model_name, DEFAULT_VERSION, engine.model_path, {}, True)
    if row.status not in SERVABLE:
        raise DeploymentNotServable(
            f"deployment {row.key} is {row.status}{': ' + row.status_reason if row.status_reason else ''}; "
            "a worker serves only a ready one (manage.py deployment_register, or prepare_model for the default)"
        )
    return _from_row(row, worker=worker)


@lru_cache(maxsize=1)
def worker_deployment(worker: str = "") -> WorkerDeployment:
    """This process's deployment (read once: both worker signals and the runtime ask for it; ``worker``: this
    worker's name, which its cache reports carry)."""
    served = find_worker_deployment(settings.DEPLOYMENTS.worker_deployment, worker=worker)
    logger.info("this worker serves deployment %s from %s", served.key, served.local_path)
    return served


def report_refusal(*, worker: str, exc: DeploymentNotServable) -> None:
    """Reports the worker ``failed`` for its deployment with the reason (the admin shows it beside the deployment);
    a host-copy failure was reported by the fill itself."""
    if isinstance(exc, HostCopyUnavailable):
        return
    wanted = settings.DEPLOYMENTS.worker_deployment
    if not wanted:
        row = ModelDeployment.objects.filter(is_default=True).first()
        wanted = row.key if row is not None else deployment_key(settings.ENGINE.served_model_name, DEFAULT_VERSION)
    Reporter(key=wanted, worker=worker).failed(str(exc))


def deployment_engine_config(base: EngineConfig, served: WorkerDeployment) -> EngineConfig:
    """``base`` (the environment's) for ``served``: its weights, its name, and its engine arguments (the ones the
    serving layer reads too, slots, context window and dtype, replace the environment's; every one goes to vLLM
    as it is)."""
    args = served.engine_args
    return dataclasses.replace(
        base,
        model=served.local_path,
        served_model_name=served.name,
        engine_args=dict(args),
        max_num_seqs=int(args.get("max_num_seqs", base.max_num_seqs)),
        max_model_len=int(args.get("max_model_len", base.max_model_len)),
        dtype=str(args.get("dtype", base.dtype)),
    )


def deployment_state(key: str, *, active_runs: int) -> WorkerState:
    """What this worker reports for its deployment now: ``ready``, or ``draining``/``drained`` once the
    deployment is draining or retired: ``drained`` when neither this worker nor the deployment has a run left
    (none generating here, none of the deployment's queued or streaming anywhere: a queued run of it still goes to
    its workers, so they must not be stopped before it is served)."""
    name, _, version = key.partition("@")
    status = ModelDeployment.objects.filter(name=name, version=version).values_list("status", flat=True).first()
    if status not in (DeploymentStatus.DRAINING, DeploymentStatus.RETIRED):
        return WorkerState.READY
    if active_runs > 0:
        return WorkerState.DRAINING
    left = Run.objects.filter(deployment__name=name, deployment__version=version, status__in=ACTIVE_STATUSES)
    return WorkerState.DRAINING if left.exists() else WorkerState.DRAINED
