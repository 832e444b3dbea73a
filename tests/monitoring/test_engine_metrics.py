"""The workers' vLLM families merged into the web's ``/metrics`` from the copies they keep in Redis."""

from __future__ import annotations

import dataclasses
import time

import pytest
from django.conf import settings
from django.test import Client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from core.redis_client import get_redis
from generation.worker_contract import (
    EngineMetricsSnapshot,
    engine_metrics_key,
    engine_metrics_snapshots,
    engine_metrics_ttl_s,
    publish_engine_metrics,
)
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.runtime import WorkerRuntime, engine_metrics_text
from monitoring.engine_metrics import merge_engine_metrics
from tests.inference_workers.conftest import fast_sim_config
from tests.monitoring.test_metrics import scrape, value

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_redis")]


def fake_engine_registry(*, generated: float, ttft_s: float, kv: float) -> CollectorRegistry:
    """A registry holding a few families named and labelled as vLLM's, plus one that is not the engine's."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=registry)
    tokens.labels("SmolLM2-135M-Instruct", "0").inc(generated)
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
        buckets=(0.1, 1.0, 10.0),
        registry=registry,
    )
    ttft.labels("SmolLM2-135M-Instruct", "0").observe(ttft_s)
    usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=registry)
    usage.labels("SmolLM2-135M-Instruct", "0").set(kv)
    Gauge("chat_queue_depth", "Not the engine's: must not travel.", registry=registry).set(99)
    return registry


def publish(worker: str, registry: CollectorRegistry, *, deployment: str = "SmolLM2-135M-Instruct") -> None:
    snapshot = EngineMetricsSnapshot(
        worker=worker, deployment=deployment, published_at=time.time(), text=engine_metrics_text(registry)
    )
    publish_engine_metrics(snapshot, ttl_s=engine_metrics_ttl_s(settings.WORKERS))


def families_of(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_a_worker_publishes_only_its_engine_families() -> None:
    text = engine_metrics_text(fake_engine_registry(generated=5, ttft_s=0.2, kv=0.1))
    families = families_of(text)
    assert set(families) == {
        "vllm:generation_tokens",
        "vllm:generation_tokens_created",
        "vllm:time_to_first_token_seconds",
        "vllm:time_to_first_token_seconds_created",
        "vllm:kv_cache_usage_perc",
    }
    assert "vllm:generation_tokens_total{" in text
    assert engine_metrics_text(CollectorRegistry()) == ""  # the simulated engine: nothing to publish


def test_two_workers_merge_into_one_family_each_and_an_expired_worker_is_absent() -> None:
    publish("w1@a", fake_engine_registry(generated=5, ttft_s=0.2, kv=0.25))
    publish("w2@b", fake_engine_registry(generated=7, ttft_s=2.0, kv=0.5))
    publish("w3@c", fake_engine_registry(generated=100, ttft_s=0.05, kv=0.9))
    get_redis().pexpire(engine_metrics_key("w3@c"), 1)  # its worker stopped publishing; the TTL ran out
    time.sleep(0.05)

    resp = Client().get("/metrics")
    assert resp.status_code == 200
    text = resp.content.decode()
    # One HELP/TYPE pair per family, with the counter's exposed name kept exactly.
    assert text.count("# TYPE vllm:generation_tokens_total counter") == 1
    assert text.count("# TYPE vllm:time_to_first_token_seconds histogram") == 1
    assert text.count("# TYPE chat_queue_depth gauge") == 1  # the system's own; the worker's copy was left out
    families = families_of(text)  # the merged exposition parses back
    samples = families["vllm:generation_tokens"]
    assert {(name, labels["worker"], labels["deployment"], v) for name, labels, v in samples} == {
        ("vllm:generation_tokens_total", "w1@a", "SmolLM2-135M-Instruct", 5.0),
        ("vllm:generation_tokens_total", "w2@b", "SmolLM2-135M-Instruct", 7.0),
    }
    assert all(labels["model_name"] == "SmolLM2-135M-Instruct" for _, labels, _ in samples)

    scraped = scrape()
    base = {"model_name": "SmolLM2-135M-Instruct", "engine": "0", "deployment": "SmolLM2-135M-Instruct"}
    assert value(scraped, "vllm:kv_cache_usage_perc", worker="w1@a", **base) == 0.25
    assert value(scraped, "vllm:kv_cache_usage_perc", worker="w2@b", **base) == 0.5
    assert value(scraped, "vllm:kv_cache_usage_perc", worker="w3@c", **base) is None
    ttft = "vllm:time_to_first_token_seconds_bucket"
    assert value(scraped, ttft, worker="w1@a", le="1.0", **base) == 1
    assert value(scraped, ttft, worker="w2@b", le="1.0", **base) == 0
    assert value(scraped, "vllm:time_to_first_token_seconds_count", worker="w2@b", **base) == 1
    assert value(scraped, "chat_queue_depth") is None
    age = value(scraped, "chat_worker_engine_metrics_age_seconds", worker="w1@a")
    assert age is not None and 0 <= age < 5
    assert value(scraped, "chat_metrics_source_up", source="engines") == 1


def test_merge_keeps_the_first_type_of_a_family_and_skips_a_snapshot_that_does_not_parse() -> None:
    first = EngineMetricsSnapshot("w1", "m", 0.0, "# TYPE vllm:x gauge\nvllm:x 1\n")
    other_type = EngineMetricsSnapshot("w2", "m", 0.0, "# TYPE vllm:x counter\nvllm:x_total 2\n# TYPE vllm:y gauge\n")
    broken = EngineMetricsSnapshot("w3", "m", 0.0, "# TYPE vllm:x gauge\nvllm:x{worker=oops 3\n")
    [family] = [f for f in merge_engine_metrics([first, other_type, broken]) if f.name == "vllm:x"]
    assert family.type == "gauge"
    assert [(s.labels["worker"], s.value) for s in family.samples] == [("w1", 1.0)]


def test_the_runtime_publishes_on_the_heartbeat_at_most_every_interval() -> None:
    registry = fake_engine_registry(generated=3, ttft_s=0.2, kv=0.1)
    config = fast_sim_config()
    worker_config = dataclasses.replace(settings.WORKERS, metrics_publish_s=60.0)
    runtime = WorkerRuntime(
        worker_name="pub@test",
        engine_config=config,
        worker_config=worker_config,
        engine=SimulatedEngine(config),
        metrics_registry=registry,
    )
    runtime.start()  # the first heartbeat publishes at once
    try:
        [snapshot] = engine_metrics_snapshots()
        assert (snapshot.worker, snapshot.deployment) == ("pub@test", runtime.host.engine.model_name)
        assert 0 < get_redis().ttl(engine_metrics_key("pub@test")) <= engine_metrics_ttl_s(worker_config)
        assert engine_metrics_ttl_s(worker_config) > 60.0 + worker_config.heartbeat_interval_s
        first = snapshot.published_at
        runtime.beat()  # within the interval: the heartbeat is written, the copy is not
        assert engine_metrics_snapshots()[0].published_at == first
    finally:
        runtime.stop()
    assert engine_metrics_snapshots() == []  # a worker that stops takes its copy with it


def test_publishing_off_writes_nothing() -> None:
    config = fast_sim_config()
    runtime = WorkerRuntime(
        worker_name="off@test",
        engine_config=config,
        worker_config=dataclasses.replace(settings.WORKERS, metrics_publish_s=0.0),
        engine=SimulatedEngine(config),
        metrics_registry=fake_engine_registry(generated=1, ttft_s=0.1, kv=0.1),
    )
    runtime.start()
    try:
        runtime.beat()
        assert engine_metrics_snapshots() == []
    finally:
        runtime.stop()
