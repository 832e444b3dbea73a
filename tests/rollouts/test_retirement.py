"""Draining a replaced version and retiring the idle ones."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from chats.models import Chat
from core.redis_client import get_redis
from deployments.models import DeploymentStatus, ModelDeployment
from generation.worker_contract import WorkerHeartbeat, WorkerState, write_heartbeat
from rollouts.retirement import retire_idle_deployments
from rollouts.selectors import deployment_drain_status
from rollouts.services import (
    rollout_rollback,
    rollout_start,
)
from runs.models import RunStatus
from tests.deployment_helpers import add_version
from tests.rollouts.helpers import FAST, make_runs

pytestmark = pytest.mark.django_db


# -- draining and retiring -----------------------------------------------------------------------------------


def test_drain_status_counts_runs_in_flight_and_workers_by_state(v1: ModelDeployment, chat: Chat) -> None:
    make_runs(v1, 2, status=RunStatus.STREAMING)
    make_runs(v1, 1, chat=chat)
    for worker, state in (("w1", WorkerState.DRAINING), ("w2", WorkerState.DRAINED), ("w3", WorkerState.DRAINED)):
        beat = WorkerHeartbeat(
            worker=worker,
            model=v1.name,
            model_version=v1.version,
            max_slots=4,
            running=0,
            waiting=0,
            kv_cache_usage=0.0,
            tpot_s=None,
            active_runs=0,
            updated_at=time.time(),
            deployment=v1.key,
            state=state,
        )
        write_heartbeat(beat, ttl_s=60, client=get_redis())

    assert deployment_drain_status(v1) == (2, {"draining": 1, "drained": 2})


def test_retire_keeps_the_newest_the_default_and_the_busy(v1: ModelDeployment, chat: Chat) -> None:
    now = timezone.now()
    long_ago = now - timedelta(days=3)
    v2 = add_version("v2", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # idle: retired
    v3 = add_version("v3", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # a run in flight: kept
    v4 = add_version("v4", weight=0)  # ready, no traffic, idle: retired
    v5 = add_version("v5", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # a recent run: kept
    v6 = add_version("v6", status=DeploymentStatus.DRAINING, drained_at=now - timedelta(minutes=5))  # just drained
    v7 = add_version("v7", weight=0)  # the newest: kept
    for age, row in enumerate([v1, v2, v3, v4, v5, v6, v7]):
        ModelDeployment.objects.filter(pk=row.pk).update(created_at=long_ago - timedelta(hours=10 - age))
    ModelDeployment.objects.filter(pk=v1.pk).update(traffic_weight=0)  # the default, even without traffic
    make_runs(v2, 3, created_at=long_ago, chat=chat)
    make_runs(v3, 1, status=RunStatus.STREAMING, created_at=long_ago)
    make_runs(v5, 1, created_at=now - timedelta(minutes=1), chat=chat)

    retired = retire_idle_deployments(idle_s=3600, now=now)

    assert sorted(row.version for row in retired) == ["v2", "v4"]
    status = dict(ModelDeployment.objects.filter(name=v1.name).values_list("version", "status"))
    assert status == {
        "v1": DeploymentStatus.READY,
        "v2": DeploymentStatus.RETIRED,
        "v3": DeploymentStatus.DRAINING,
        "v4": DeploymentStatus.RETIRED,
        "v5": DeploymentStatus.DRAINING,
        "v6": DeploymentStatus.DRAINING,
        "v7": DeploymentStatus.READY,
    }
    gone = ModelDeployment.objects.get(pk=v2.pk)
    assert gone.retired_at == now and gone.traffic_weight == 0
    assert retire_idle_deployments(idle_s=3600, now=now) == []


def test_retire_leaves_a_running_rollouts_versions_alone(v1: ModelDeployment) -> None:
    long_ago = timezone.now() - timedelta(days=3)
    v2 = add_version("v2")
    add_version("v3", weight=0)
    ModelDeployment.objects.filter(pk=v2.pk).update(created_at=long_ago)
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)

    assert retire_idle_deployments(idle_s=60) == []

    rollout_rollback(started, "not now")
    assert [row.version for row in retire_idle_deployments(idle_s=60)] == ["v2"]
