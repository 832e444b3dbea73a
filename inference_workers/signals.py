"""Worker lifecycle: build the engine when a worker starts (before it consumes), tear it down at shutdown."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_init, worker_shutdown
from django.conf import settings

from core.db_executor import reconnect_after_db_error
from core.redis_client import get_redis
from deployments.tokenizer import get_tokenizer, serve_model_in_process
from generation.worker_contract import WorkerState
from inference_workers.deployment import (
    DeploymentNotServable,
    deployment_engine_config,
    deployment_state,
    report_refusal,
    worker_deployment,
)
from inference_workers.guard_server import start_guard_server, stop_guard_server
from inference_workers.runtime import start_runtime, stop_runtime

logger = logging.getLogger(__name__)

WORKER_REFUSED_EXIT_CODE = 3
"""The exit status of a worker that refuses to serve its deployment (not ready, no verified copy on this host)."""


def _consumes_tier_queues(worker: Any) -> bool:
    consumed = set(worker.app.amqp.queues.consume_from or worker.app.amqp.queues)
    return bool(consumed & set(settings.CELERY_TASK_QUEUES_ORDER))


@worker_init.connect(dispatch_uid="inference_workers.start_engine")
def start_engine(sender: Any = None, **kwargs: Any) -> None:
    """Runs in the worker's main process before the consumer starts, so no task waits for the engine."""
    if sender is None or not _consumes_tier_queues(sender):
        return
    try:
        served = worker_deployment(sender.hostname)
    except DeploymentNotServable as exc:
        # Celery logs and swallows an exception raised here, then consumes with no engine: exit instead, before
        # any queue is consumed (a supervisor restarting it retries the fill, and the admin shows why it failed).
        logger.critical("worker %s refuses to serve: %s", sender.hostname, exc)
        report_refusal(worker=sender.hostname, exc=exc)
        raise SystemExit(WORKER_REFUSED_EXIT_CODE) from exc
    logger.info("worker %s: building the %s engine for %s", sender.hostname, settings.ENGINE.backend, served.key)
    serve_model_in_process(served.local_path)  # prompts are rendered with the deployment's own tokenizer
    runtime = start_runtime(
        worker_name=sender.hostname,
        engine_config=deployment_engine_config(settings.ENGINE, served),
        deployment=served.key,
        state_of=_deployment_state,
    )
    # Guard checks (the ``guard`` moderation backend) for this deployment: one engine step each, beside the runs.
    start_guard_server(
        host=runtime.host, deployment=served.key, client=get_redis(), max_prompts=runtime.host.engine.max_num_seqs
    )
    get_tokenizer()  # prompts are rendered with it: load it now, not in the first task (~10 s on a busy CPU)
    serve_engine_metrics(settings.WORKERS.metrics_port, addr=settings.WORKERS.metrics_addr)


def _deployment_state(key: str, active_runs: int) -> WorkerState:
    with reconnect_after_db_error():  # the heartbeat thread's connection: a Postgres restart must not stick
        return deployment_state(key, active_runs=active_runs)


def serve_engine_metrics(port: int, *, addr: str = "127.0.0.1") -> None:
    """Serves this process's Prometheus registry (vLLM registers its engine metrics there) on ``addr:port``.

    vLLM's ``PrometheusStatLogger`` always joins our own stat logger, so its ``vllm:*`` families (time to first
    token, prefix-cache hits, KV-cache usage, preemptions...) are there as in ``vllm serve``'s ``/metrics``.
    A port that is taken is logged, not fatal: the worker still serves runs. It is an option: the runtime's
    heartbeat also copies these families to Redis (``WORKER_METRICS_PUBLISH_S``) and the web's ``/metrics`` merges
    them, so one scrape target covers every worker. ``addr`` is loopback unless
    ``WORKER_METRICS_ADDR`` says otherwise (``start_http_server`` alone would listen on every interface).
    """
    if port <= 0:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=addr)
    except OSError as exc:
        logger.error(
            "worker metrics: cannot listen on %s:%s (%s); WORKER_METRICS_PORT must differ per process", addr, port, exc
        )
        return
    logger.info("worker metrics: vLLM's Prometheus metrics on %s:%s/metrics", addr, port)


@worker_shutdown.connect(dispatch_uid="inference_workers.stop_engine")
def stop_engine(sender: Any = None, **kwargs: Any) -> None:
    stop_guard_server()
    stop_runtime()
