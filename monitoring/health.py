"""Liveness and readiness probes.

``/readyz`` tells what this web process can serve, in its JSON body: the database, Redis, the served model's
tokenizer (prompts need it), and the default deployment's when its copy is another folder (registered from a store,
a new version: ``deployments.readiness`` loads it at start). It answers 503 while any of them is missing, so a
load balancer sends no prompts to a process that would refuse them. The workers are reported too
(``workers_ready``: live heartbeats, that is engines built and consuming) but do not make a web process unready:
without a worker, prompts are still accepted and wait in the queue.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse

from core.redis_client import get_redis
from deployments.selection import default_deployment
from deployments.tokenizer import serving_model_path, tokenizer_status
from generation.worker_contract import worker_heartbeats


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        checks["database"] = f"error: {exc.__class__.__name__}"
    workers: int | None = None
    try:
        get_redis().ping()
        checks["redis"] = "ok"
        workers = len(worker_heartbeats())
    except Exception as exc:  # noqa: BLE001
        checks["redis"] = f"error: {exc.__class__.__name__}"
    checks[f"tokenizer:{settings.ENGINE.served_model_name}"] = tokenizer_status()
    try:
        default = default_deployment() if checks["database"] == "ok" else None
    except DatabaseError as exc:  # the deployments table not migrated yet
        checks["deployments"] = f"error: {exc.__class__.__name__}"
        default = None
    if default is not None and default.local_path and default.local_path != serving_model_path():
        checks[f"tokenizer:{default.key}"] = tokenizer_status(default.local_path)
    ready = all(v == "ok" for v in checks.values())
    body = {"status": "ready" if ready else "not ready", "checks": checks, "workers_ready": workers}
    return JsonResponse(body, status=200 if ready else 503)
