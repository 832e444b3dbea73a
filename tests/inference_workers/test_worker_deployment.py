"""A worker serves one deployment: what it builds, what it consumes, and what it reports while its version drains."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from django.conf import settings

from deployments.models import DeploymentStatus, ModelDeployment
from deployments.selection import forget_cached, ready_workers
from generation.worker_contract import WorkerState, deployment_queue, deployment_ready_key, worker_heartbeats
from inference_workers.affinity import consume_own_queue
from inference_workers.deployment import (
    DeploymentNotServable,
    deployment_engine_config,
    deployment_state,
    find_worker_deployment,
    worker_deployment,
)
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.runtime import WorkerRuntime
from runs.models import Run, RunStatus
from scheduling.affinity import worker_queue
from tests.deployment_helpers import add_version, no_ready_worker
from tests.factories import RunFactory
from tests.inference_workers.conftest import fast_sim_config, wait_for

NAME = settings.ENGINE.served_model_name
V2 = f"{NAME}@v2"


@pytest.fixture(autouse=True)
def fresh_worker_deployment() -> Iterator[None]:
    worker_deployment.cache_clear()
    yield
    worker_deployment.cache_clear()


@pytest.mark.django_db
def test_the_default_worker_serves_the_default_deployment() -> None:
    served = find_worker_deployment("")
    assert (served.key, served.is_default) == (f"{NAME}@v1", True)
    assert served.local_path == settings.ENGINE.model_path


@pytest.mark.django_db
def test_a_worker_builds_its_engine_from_the_deployments_copy_and_arguments() -> None:
    add_version("v2", local_path="/models/other", engine_args={"max_num_seqs": 4, "max_model_len": 1024, "seed": 7})
    served = find_worker_deployment(V2)
    config = deployment_engine_config(settings.ENGINE, served)
    assert (config.model_path, config.served_model_name) == ("/models/other", NAME)
    assert (config.max_num_seqs, config.max_model_len) == (4, 1024)
    assert config.engine_args == {"max_num_seqs": 4, "max_model_len": 1024, "seed": 7}  # all of them go to vLLM
    assert config.dtype == settings.ENGINE.dtype


@pytest.mark.django_db
@pytest.mark.parametrize("status", [DeploymentStatus.REGISTERED, DeploymentStatus.FAILED, DeploymentStatus.RETIRED])
def test_a_worker_refuses_a_deployment_it_cannot_serve(status: str) -> None:
    add_version("v2", status=status, status_reason="no weights" if status == "failed" else "")
    with pytest.raises(DeploymentNotServable, match=f"{V2} is {status}"):
        find_worker_deployment(V2)
    with pytest.raises(DeploymentNotServable, match="not registered"):
        find_worker_deployment(f"{NAME}@v9")


def gpu_app(settings: Any, deployment: str) -> Celery:
    settings.DEPLOYMENTS = dataclasses.replace(settings.DEPLOYMENTS, worker_deployment=deployment)
    app = Celery("gpu", set_as_current=False)
    app.amqp.queues.select(settings.CELERY_TASK_QUEUES_ORDER)
    return app


@pytest.mark.django_db
def test_a_worker_of_another_version_consumes_only_its_deployments_queues(settings: Any) -> None:
    add_version("v2")
    app = gpu_app(settings, V2)
    consume_own_queue(sender="gpu-b@host", instance=SimpleNamespace(app=app))
    tiers = settings.CELERY_TASK_QUEUES_ORDER
    assert list(app.amqp.queues.consume_from) == [deployment_queue(t, V2) for t in tiers] + [worker_queue("gpu-b@host")]


@pytest.mark.django_db
def test_the_default_worker_also_drains_the_plain_tier_queues_after_its_own(settings: Any) -> None:
    app = gpu_app(settings, "")
    consume_own_queue(sender="gpu-a@host", instance=SimpleNamespace(app=app))
    tiers = settings.CELERY_TASK_QUEUES_ORDER
    own = [deployment_queue(t, f"{NAME}@v1") for t in tiers]
    assert list(app.amqp.queues.consume_from) == [*own, *tiers, worker_queue("gpu-a@host")]


@pytest.mark.django_db
def test_the_reported_state_follows_the_deployments_status() -> None:
    v2 = add_version("v2")
    assert deployment_state(V2, active_runs=2) == WorkerState.READY
    ModelDeployment.objects.filter(name=NAME, version="v2").update(status=DeploymentStatus.DRAINING)
    assert deployment_state(V2, active_runs=2) == WorkerState.DRAINING
    queued = RunFactory.create(deployment=v2, status=RunStatus.QUEUED)  # still to be served by v2's workers
    assert deployment_state(V2, active_runs=0) == WorkerState.DRAINING
    Run.objects.filter(pk=queued.pk).update(status=RunStatus.DONE)
    assert deployment_state(V2, active_runs=0) == WorkerState.DRAINED


def sim_runtime(**kwargs: Any) -> WorkerRuntime:
    config = fast_sim_config()
    return WorkerRuntime(
        worker_name="v2@test",
        engine_config=config,
        worker_config=settings.WORKERS,
        engine=SimulatedEngine(config),
        deployment=V2,
        **kwargs,
    )


class CountingEngine(SimulatedEngine):
    """The simulated engine, counting the requests it was given before the first heartbeat."""

    def __init__(self, config: Any, client: Any) -> None:
        super().__init__(config)
        self.client = client
        self.before_first_beat: list[str] = []

    async def generate(self, request: Any) -> Any:  # type: ignore[override]
        if not self.client.exists(deployment_ready_key(V2)):
            self.before_first_beat.append(request.request_id)
        async for delta in super().generate(request):
            yield delta


@pytest.mark.django_db
def test_a_worker_answers_a_warm_up_generation_before_it_heartbeats_ready(clean_redis: Any) -> None:
    add_version("v2", worker=False)
    config = fast_sim_config()
    engine = CountingEngine(config, clean_redis)
    runtime = WorkerRuntime(
        worker_name="v2@test", engine_config=config, worker_config=settings.WORKERS, engine=engine, deployment=V2
    )
    runtime.start()
    try:
        assert [rid.split("-")[:2] for rid in engine.before_first_beat] == [["warm", "up"]]
        forget_cached()
        assert ready_workers(V2) == 1
        assert [(b.deployment, b.state) for b in worker_heartbeats()] == [(V2, WorkerState.READY)]
    finally:
        runtime.stop()
    forget_cached()
    assert ready_workers(V2) == 0  # a stopped worker leaves the ready listing at once


@pytest.mark.django_db
def test_a_draining_worker_leaves_the_ready_listing_and_hands_its_runs_on_past_the_deadline() -> None:
    add_version("v2", worker=False)
    states = {"now": WorkerState.READY}
    runtime = sim_runtime(state_of=lambda key, active: states["now"], status_check_s=0.0, drain_deadline_s=0.2)
    runtime.start()
    try:
        forget_cached()
        assert ready_workers(V2) == 1
        active = runtime.register(run_id=42, attempt=1)
        states["now"] = WorkerState.DRAINING
        runtime.refresh_state()
        runtime.beat()
        forget_cached()
        assert ready_workers(V2) == 0 and [b.state for b in worker_heartbeats()] == [WorkerState.DRAINING]
        assert not active.handoff_requested.is_set()  # within the deadline its runs may still finish here
        time.sleep(0.25)
        runtime.refresh_state()
        assert active.handoff_requested.is_set()
        runtime.unregister(42)
        states["now"] = WorkerState.DRAINED
        wait_for(lambda: [b.state for b in worker_heartbeats()] == [WorkerState.DRAINED], timeout=5, what="drained")
    finally:
        runtime.stop()
    no_ready_worker(V2)
