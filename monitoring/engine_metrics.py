"""The workers' vLLM metrics merged into the web's ``/metrics``, so one scrape target covers the whole system.

Each worker copies its engine's ``vllm:*`` families to Redis every ``WORKER_METRICS_PUBLISH_S`` (the worker
contract's :class:`~generation.worker_contract.EngineMetricsSnapshot`, with a TTL). A scrape reads every snapshot still
there, parses it back, adds the labels ``worker`` and ``deployment`` to each sample and puts the samples of one
family from every worker into one family (a family must appear once in an exposition), keeping its type and help.
A worker whose snapshot expired is simply absent; the scrape never waits on a worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from generation.worker_contract import ENGINE_METRIC_FAMILY_PREFIX, EngineMetricsSnapshot, engine_metrics_snapshots

logger = logging.getLogger(__name__)

ADDED_LABELS = ("worker", "deployment")


def merge_engine_metrics(snapshots: Iterable[EngineMetricsSnapshot]) -> list[Metric]:
    """One family per ``vllm:*`` name with every worker's samples, labelled ``worker`` and ``deployment``.

    A family whose type differs from the one seen first (workers of two vLLM versions) keeps the first and drops
    the other worker's samples, logged; a snapshot that does not parse is skipped whole. The parser names counter
    families without ``_total`` but keeps it on their samples, so re-emitting them exposes the names unchanged.
    """
    merged: dict[str, Metric] = {}
    for snapshot in snapshots:
        try:
            families = list(text_string_to_metric_families(snapshot.text))
        except Exception:  # a malformed exposition costs that worker's engine figures, not the scrape
            logger.warning("metrics: engine metrics of worker %s do not parse; skipped", snapshot.worker, exc_info=True)
            continue
        extra = {"worker": snapshot.worker, "deployment": snapshot.deployment}
        for family in families:
            if not family.name.startswith(ENGINE_METRIC_FAMILY_PREFIX):
                continue
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation, family.type)
            elif target.type != family.type:
                logger.warning(
                    "metrics: %s is a %s on worker %s but a %s elsewhere; its samples are left out",
                    family.name,
                    family.type,
                    snapshot.worker,
                    target.type,
                )
                continue
            for sample in family.samples:
                target.add_sample(sample.name, {**sample.labels, **extra}, sample.value)
    return [merged[name] for name in sorted(merged)]


def engine_families(now: float | None = None) -> Iterator[Metric]:
    """The merged families, then how old each worker's copy is (raises ``redis.RedisError`` when Redis is down)."""
    snapshots = engine_metrics_snapshots()
    now = time.time() if now is None else now
    yield from merge_engine_metrics(snapshots)
    age = GaugeMetricFamily(
        "chat_worker_engine_metrics_age_seconds",
        "Seconds since the worker copied the vllm:* figures merged here (at most WORKER_METRICS_PUBLISH_S plus "
        "one heartbeat interval while it lives).",
        labels=["worker"],
    )
    for snapshot in snapshots:
        age.add_metric([snapshot.worker], max(0.0, now - snapshot.published_at))
    yield age
