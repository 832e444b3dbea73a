"""Every ``chat_*`` metric the Grafana dashboard queries exists in ``/metrics`` once the system has worked a bit:
a run went through the dispatcher and a worker, a prompt was refused. (Its ``vllm:*`` names need the real engine:
``tests/inference_workers/test_worker_engine.py`` checks them.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks

from accounts.models import UserLimitOverride
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.dispatcher_wiring import build_dispatcher
from runs.models import Run, RunStatus
from scheduling.policy import QueuedRun
from tests.factories import UserFactory
from tests.inference_workers.conftest import running_sim_runtime
from tests.monitoring.dashboard import dashboard_metric_names, exposed_sample_names
from tests.monitoring.test_metrics import _post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_redis")]


@pytest.fixture
def runtime() -> Iterator[WorkerRuntime]:
    with running_sim_runtime("dashboard@test") as rt:
        yield rt


def test_every_chat_metric_of_the_dashboard_is_exposed(
    runtime: WorkerRuntime, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    names = dashboard_metric_names()
    assert {n for n in names if n.startswith("vllm:")}, "the dashboard shows vLLM's figures too"
    wanted = {n for n in names if n.startswith("chat_")}

    user = UserFactory.with_tier("plus")
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=1)
    with django_capture_on_commit_callbacks(execute=True):
        accepted = _post(user)
    assert accepted.status_code == 202
    assert _post(user).status_code == 429  # a refusal, by reason

    runtime.beat()
    dispatcher = build_dispatcher()
    done: list[RunStatus | None] = []

    def send(run: QueuedRun) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            done.append(generate_run(run_id=run.run_id, runtime=runtime))

    dispatcher.send = send
    dispatcher.send_batch = None  # each run through the test's send, not Celery
    dispatcher.tick()
    assert done == [RunStatus.DONE]
    assert Run.objects.get(pk=accepted.json()["run"]["id"]).status == RunStatus.DONE

    resp = Client().get("/metrics")
    assert resp.status_code == 200
    missing = sorted(wanted - exposed_sample_names(resp.content.decode()))
    assert not missing, f"the dashboard queries metrics /metrics does not expose: {missing}"
