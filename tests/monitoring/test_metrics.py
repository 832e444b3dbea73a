"""``GET /metrics``: Prometheus figures of the whole system, read from Redis and Postgres at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks, Settings
from rest_framework.test import APIClient

from accounts.models import User, UserLimitOverride
from core.redis_client import get_redis
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, UserFactory
from tests.inference_workers.conftest import running_sim_runtime
from tests.monitoring.test_health import closed_port, redis_down  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Client | None = None, **headers: str) -> Samples:
    resp = (client or Client()).get("/metrics", headers=headers)
    assert resp.status_code == 200, resp.content
    assert resp["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(resp.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture
def runtime() -> Iterator[WorkerRuntime]:
    with running_sim_runtime("metrics@test") as rt:
        yield rt


def _post(user: User, content: str = "Hello there") -> Any:
    api = APIClient()
    api.force_authenticate(user)
    chat = ChatFactory.create(owner=user)
    return api.post(f"/api/chats/{chat.pk}/messages", {"content": content}, format="json")


@pytest.mark.usefixtures("clean_redis")
def test_a_finished_run_is_counted_with_its_tokens_and_latencies(
    runtime: WorkerRuntime, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    user = UserFactory.with_tier("pro")
    before = scrape()
    assert value(before, "chat_runs_admitted_total", tier="pro") is None

    with django_capture_on_commit_callbacks(execute=True):
        resp = _post(user)
    assert resp.status_code == 202
    queued = scrape()
    assert value(queued, "chat_runs_admitted_total", tier="pro") == 1
    assert value(queued, "chat_queue_depth", tier="pro") == 1
    assert value(queued, "chat_runs_active", tier="pro", status="queued") == 1

    with django_capture_on_commit_callbacks(execute=True):
        assert generate_run(run_id=resp.json()["run"]["id"], runtime=runtime) == RunStatus.DONE
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    assert run.first_token_at is not None and run.started_at is not None
    done = scrape()
    assert value(done, "chat_runs_finished_total", tier="pro", status="done") == 1
    assert value(done, "chat_output_tokens_total", tier="pro") == run.output_tokens > 0
    assert value(done, "chat_input_tokens_total", tier="pro") == run.input_tokens > 0
    assert value(done, "chat_queue_depth", tier="pro") == 0
    assert value(done, "chat_runs_active", tier="pro", status="queued") is None
    ttft = (run.first_token_at - run.created_at).total_seconds()
    assert value(done, "chat_run_ttft_seconds_count", tier="pro") == 1
    assert value(done, "chat_run_ttft_seconds_sum", tier="pro") == pytest.approx(ttft, abs=1e-6)
    assert value(done, "chat_run_ttft_seconds_bucket", tier="pro", le="+Inf") == 1
    assert value(done, "chat_run_ttft_seconds_bucket", tier="pro", le="300.0") == 1
    assert value(done, "chat_run_queue_wait_seconds_count", tier="pro") == 1
    # The buckets are cumulative: a bound below the observed TTFT holds nothing, every bound above holds it.
    below = [b for b in (0.1, 0.25, 0.5, 1.0) if b < ttft]
    for bound in below:
        assert value(done, "chat_run_ttft_seconds_bucket", tier="pro", le=repr(bound)) == 0


@pytest.mark.usefixtures("clean_redis")
def test_refusals_are_counted_by_limit() -> None:
    user = UserFactory.with_tier("free")
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=1)
    assert _post(user).status_code == 202
    resp = _post(user)  # another chat, while the first run is still queued
    assert resp.status_code == 429 and resp.json()["error"]["code"] == "limit_concurrency"
    samples = scrape()
    assert value(samples, "chat_runs_refused_total", tier="free", reason="concurrency") == 1
    assert value(samples, "chat_runs_refused_total", tier="free", reason="tokens") is None


@pytest.mark.usefixtures("clean_redis")
def test_worker_heartbeats_become_gauges(runtime: WorkerRuntime) -> None:
    runtime.beat()
    samples = scrape()
    engine = runtime.host.engine
    up = {"worker": "metrics@test", "model": engine.model_name, "deployment": "", "state": "ready"}
    assert value(samples, "chat_worker_up", **up) == 1
    assert value(samples, "chat_worker_slots", worker="metrics@test") == engine.max_num_seqs
    assert value(samples, "chat_worker_running", worker="metrics@test") == 0
    assert value(samples, "chat_worker_prefix_cache_queries_total", worker="metrics@test") == 0
    age = value(samples, "chat_worker_heartbeat_age_seconds", worker="metrics@test")
    assert age is not None and 0 <= age < 5
    get_redis().delete(f"worker:heartbeat:{runtime.worker_name}")
    assert value(scrape(), "chat_worker_up", **up) is None


@pytest.mark.usefixtures("clean_redis")
def test_metrics_token_is_required_when_configured(settings: Settings) -> None:
    settings.METRICS_TOKEN = "s3cret"
    resp = Client().get("/metrics")
    assert resp.status_code == 401 and b"METRICS_TOKEN" in resp.content
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert value(scrape(Authorization="Bearer s3cret"), "chat_metrics_source_up", source="runs") == 1


@pytest.mark.usefixtures("redis_down")
def test_redis_down_marks_its_sources_down_and_still_answers() -> None:
    samples = scrape()
    assert value(samples, "chat_metrics_source_up", source="runs") == 0
    assert value(samples, "chat_metrics_source_up", source="workers") == 0
    assert value(samples, "chat_metrics_source_up", source="database") == 1
