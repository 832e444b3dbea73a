"""Where a dispatched run goes: chat affinity on the web side of the worker contract.

Each GPU worker consumes its own queue (``worker.<name>``) besides the tier queues. A run goes to the worker
that served its chat's previous turn (``chat.last_worker``, written when a run finishes) while that worker
is alive and has room (:func:`scheduling.affinity.choose_route`), so its prefix cache still holds the
chat's prompt; otherwise to the shared tier queue, where any worker takes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.db_executor import reconnect_after_db_error
from generation.worker_contract import (
    GenerateMessage,
    WorkerHeartbeat,
    deployment_queue,
    send_generates,
    worker_heartbeats_of,
)
from runs.lifecycle_log import RunStep, log_run_step, log_step
from runs.models import Run
from scheduling.affinity import Route, WorkerLoad, choose_route

logger = logging.getLogger(__name__)


def previous_worker_load(worker: str, heartbeats: Mapping[str, WorkerHeartbeat]) -> list[WorkerLoad]:
    """The chat's previous worker as the router sees it (empty: none, or gone), from the heartbeats read for the
    batch."""
    beat = heartbeats.get(worker) if worker else None
    if beat is None:
        return []
    return [
        WorkerLoad(
            name=beat.worker,
            slots=beat.max_slots,
            running=beat.running,
            waiting=beat.waiting,
            updated_at=beat.updated_at,
            deployment=beat.deployment,
        )
    ]


def _runs_for_dispatch(run_ids: list[int]) -> dict[int, Run]:
    """What routing and the ``dispatched`` line need of the runs: their ids, tier, model and chat's last worker
    (one query for them all). A run that is gone is missing."""
    rows = (
        Run.objects.select_related("tier", "chat")
        .only("id", "user", "model", "worker", "tier__name", "chat__last_worker")
        .filter(pk__in=run_ids)
    )
    return {run.pk: run for run in rows}


def route_run(
    *,
    previous: str,
    tier_queue: str,
    heartbeats: Mapping[str, WorkerHeartbeat],
    deployment: str = "",
) -> Route:
    """Where ``generate(run)`` goes: the chat's previous worker's (``previous``: its ``last_worker``) own queue
    (when it serves the run's deployment), or the tier queue of the run's deployment. ``heartbeats``: the previous
    workers' heartbeats, read once for the batch (``worker_heartbeats_of``)."""
    if not settings.CONTEXT.chat_affinity:
        return Route(queue=tier_queue, worker=None, reason="disabled")
    workers = [w for w in previous_worker_load(previous, heartbeats) if not deployment or w.deployment == deployment]
    return choose_route(
        previous_worker=previous,
        tier_queue=tier_queue,
        workers=workers,
        now=time.time(),
        stale_after_s=float(settings.WORKERS.heartbeat_ttl_s),
    )


@dataclass(frozen=True)
class Dispatch:
    """One ``generate(run_id)`` to publish: the run's tier queue, vLLM's priority the dispatcher chose (None: the
    run's tier priority), the run's deployment (``name@version``; empty: the plain tier queue).

    ``last_worker`` and ``user_id``, when the caller knows them (the dispatcher: the scheduler's queue keeps them),
    spare the routing its read of the run: its chat's ``last_worker`` ("" when none) and its user. None: read here.
    """

    run_id: int
    queue: str
    engine_priority: int | None = None
    deployment: str = ""
    last_worker: str | None = None
    user_id: int | None = None


def send_to_workers(dispatches: list[Dispatch]) -> list[tuple[Dispatch, Exception]]:
    """Publishes each :class:`Dispatch` as :func:`send_to_worker` does, with at most one routing query (none when
    every dispatch names its ``last_worker`` and user, as the dispatcher's do), one read of the previous workers'
    heartbeats and one broker round trip for them all (the dispatcher sends a tick's runs at once:
    :func:`generation.worker_contract.send_generates`). Routing never blocks a run: when a lookup fails, the run
    goes to its tier queue. Returns the dispatches that could not be published, with the error."""
    unknown = sorted({d.queue for d in dispatches} - set(settings.CELERY_TASK_QUEUES_ORDER))
    if unknown:
        raise ValueError(f"unknown worker queue(s) {unknown}")
    runs: dict[int, Run] = {}
    heartbeats: dict[str, WorkerHeartbeat] = {}
    looked_up = True
    unknown_runs = [d.run_id for d in dispatches if d.last_worker is None or d.user_id is None]
    if unknown_runs:
        try:
            with reconnect_after_db_error():  # Postgres restarted: the next lookup connects again
                runs = _runs_for_dispatch(unknown_runs)
        except Exception:  # a database hiccup: any worker will do
            logger.exception("chat affinity lookup of %d runs failed; using the tier queues", len(unknown_runs))
            looked_up = False
    previous = {d.run_id: _previous_worker(d, runs.get(d.run_id)) for d in dispatches}
    if looked_up and settings.CONTEXT.chat_affinity:
        try:
            heartbeats = worker_heartbeats_of(worker for worker in previous.values() if worker)
        except Exception:  # a Redis hiccup reading the previous workers' heartbeats: any worker will do
            logger.exception("chat affinity: reading the previous workers' heartbeats failed; using the tier queues")
            looked_up = False
    routed = [
        (d, runs.get(d.run_id), _route(d, previous[d.run_id], heartbeats, looked_up=looked_up)) for d in dispatches
    ]
    errors = send_generates([GenerateMessage(d.run_id, route.queue, d.engine_priority) for d, _run, route in routed])
    failed: list[tuple[Dispatch, Exception]] = []
    for (dispatch, run, route), error in zip(routed, errors, strict=True):
        if error is not None:
            failed.append((dispatch, error))
        else:
            _log_dispatched(dispatch, run, route)
    return failed


def _previous_worker(dispatch: Dispatch, run: Run | None) -> str:
    """The chat's ``last_worker`` of ``dispatch``: as the dispatch names it, else from the run read ("" when gone)."""
    if dispatch.last_worker is not None:
        return dispatch.last_worker
    return run.chat.last_worker if run is not None else ""


def _route(dispatch: Dispatch, previous: str, heartbeats: Mapping[str, WorkerHeartbeat], *, looked_up: bool) -> Route:
    tier_queue = deployment_queue(dispatch.queue, dispatch.deployment) if dispatch.deployment else dispatch.queue
    failed = Route(queue=tier_queue, worker=None, reason="affinity_lookup_failed")
    if not looked_up:
        return failed
    try:
        return route_run(
            previous=previous, tier_queue=tier_queue, deployment=dispatch.deployment, heartbeats=heartbeats
        )
    except Exception:  # routing never blocks a run: any worker will do
        logger.exception("run %s: chat affinity routing failed; using the tier queue", dispatch.run_id)
        return failed


def _log_dispatched(dispatch: Dispatch, run: Run | None, route: Route) -> None:
    run_id = dispatch.run_id
    message = f"run {run_id} sent to queue {route.queue} ({route.reason})"
    fields: dict[str, Any] = {"queue": route.queue, "route": route.reason, "engine_priority": dispatch.engine_priority}
    if run is not None:
        log_run_step(RunStep.DISPATCHED, run, message, worker=route.worker or "", **fields)
        return
    # The dispatcher's (the queue named its user and deployment), or a run gone or whose lookup failed: the line
    # still says where it went.
    log_step(
        RunStep.DISPATCHED,
        message,
        run_id=run_id,
        user_id=dispatch.user_id,
        tier=dispatch.queue,
        deployment=dispatch.deployment.partition("@")[0],
        worker=route.worker or "",
        **fields,
    )


def send_to_worker(*, run_id: int, queue: str, engine_priority: int | None = None, deployment: str = "") -> None:
    """Publishes ``generate(run_id)`` for the tier ``queue``: on the chat's previous worker's queue when
    affinity applies (and that worker serves ``deployment``), else on the deployment's tier queue
    (``pro.name@version``; the plain tier queue for a run without one); the workers drain their tier queues in
    order. ``engine_priority``: vLLM's priority the dispatcher chose (None: the run's tier priority). Raises what
    the publish raised."""
    failed = send_to_workers([Dispatch(run_id, queue, engine_priority, deployment)])
    if failed:
        raise failed[0][1]
