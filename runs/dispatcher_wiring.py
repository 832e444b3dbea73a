"""The dispatcher loop (``scheduling.dispatcher``) wired to Django: tiers from the database, worker heartbeats
from the worker contract, ``runs.routing.send_to_workers`` (the only way into Celery), queue-position status
events on the runs' streams, and the leader's housekeeping (``runs.reaper``)."""

from __future__ import annotations

import logging
import time

from django.conf import settings

from accounts.models import Tier
from core.db_executor import reconnect_after_db_error
from core.redis_client import get_redis
from generation.worker_contract import request_yields, worker_heartbeats
from runs.dispatcher_figures import DispatcherFigures
from runs.models import RunStatus
from runs.reaper import reap_orphaned_runs, requeue_lost_runs
from runs.routing import Dispatch, send_to_workers
from runs.streaming.contract import StreamEvent, append_to_many
from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy, TierGate, parse_gates
from scheduling.policy import FairPolicy, QueuedRun, TierSpec
from scheduling.redis_store import RedisQueueStore
from scheduling.store import Position

logger = logging.getLogger(__name__)

DEFAULT_GATE = TierGate(max_waiting=1, max_tpot_s=1.0)


def engine_samples() -> list[EngineSample]:
    """The workers' latest heartbeats as the gate's samples (empty when no worker reports)."""
    return [
        EngineSample(
            slots=hb.max_slots,
            running=hb.running,
            waiting=hb.waiting,
            tpot_s=hb.tpot_s,
            updated_at=hb.updated_at,
            stats_at=hb.stats_at,
            deployment=hb.deployment,
        )
        for hb in worker_heartbeats()
    ]


def _dispatch(run: QueuedRun) -> Dispatch:
    return Dispatch(
        run.run_id, run.tier, run.engine_priority, run.deployment, last_worker=run.last_worker, user_id=run.user_id
    )


def send_run(run: QueuedRun) -> None:
    """One run sent (raises what its publish raised)."""
    failed = send_to_workers([_dispatch(run)])
    if failed:
        raise failed[0][1]


def send_runs(runs: list[QueuedRun]) -> list[QueuedRun]:
    """A tick's runs, sent at once (``runs.routing.send_to_workers``: no database read, the queue kept each run's
    user and chat's last worker); returns those not sent."""
    dispatches = [_dispatch(run) for run in runs]
    failed = send_to_workers(dispatches)
    for dispatch, exc in failed:
        logger.error("sending run %s failed (%s); it goes back to its queue", dispatch.run_id, exc)
    lost = {dispatch.run_id for dispatch, _exc in failed}
    return [run for run in runs if run.run_id in lost]


def ask_runs_to_yield(run_ids: list[int]) -> None:
    """The workers generating these runs hand them off (a preemption: ``generation.worker_contract.request_yields``)."""
    request_yields(run_ids, client=get_redis())


def publish_positions(positions: dict[int, Position]) -> None:
    """A ``status`` event on each run's stream whose position or estimated wait changed (two round trips in all:
    :func:`runs.streaming.contract.append_to_many`)."""
    events = [
        (
            run_id,
            StreamEvent.STATUS,
            {
                "status": RunStatus.QUEUED,
                "queue_position": pos.queue_position,
                "estimated_wait_s": pos.estimated_wait_s,
            },
        )
        for run_id, pos in positions.items()
    ]
    for start in range(0, len(events), POSITIONS_PER_PIPELINE):
        refused = append_to_many(events[start : start + POSITIONS_PER_PIPELINE], client=get_redis())
        if refused:
            logger.debug("%d queue positions were not written: their runs had started", refused)


POSITIONS_PER_PIPELINE = 500
"""Status events per pipeline: a bounded reply to parse at a time (``max_positions`` is 1,000 by default)."""


class Housekeeping:
    """The leader's periodic repairs (called every ``DispatcherSettings.housekeeping_interval_s``): runs whose
    worker died mid-stream each time, queued runs whose push was lost every ``lost_runs_every_s`` (those are
    at least 30 s old anyway).

    The dispatcher's database connection is no request's, so Django never closes it: after a Postgres
    restart every query would fail on the dead one. A failure closes it, and the next call connects again.
    """

    def __init__(self, *, lost_runs_every_s: float = 10.0) -> None:
        self.lost_runs_every_s = lost_runs_every_s
        self._lost_runs_checked_at = float("-inf")

    def __call__(self) -> None:
        with reconnect_after_db_error():
            reap_orphaned_runs()
            if time.monotonic() - self._lost_runs_checked_at >= self.lost_runs_every_s:
                self._lost_runs_checked_at = time.monotonic()
                requeue_lost_runs()


def build_dispatcher(*, use_leader_lock: bool = True) -> Dispatcher:
    cfg = settings.SCHEDULER
    tiers = list(Tier.objects.order_by("priority"))
    configured = parse_gates(cfg.gates_spec)
    gates = {t.name: configured.get(t.name, DEFAULT_GATE) for t in tiers}
    return Dispatcher(
        store=RedisQueueStore(get_redis(), tiers=[t.name for t in tiers]),
        policy=FairPolicy(TierSpec(name=t.name, priority=t.priority, share_floor=t.share_floor) for t in tiers),
        gate=GatePolicy(
            gates=gates,
            fallback_max_in_flight=cfg.fallback_max_in_flight,
            idle_running_fraction=cfg.idle_running_fraction,
            headroom_slots=cfg.headroom_slots,
            preempt=cfg.preempt,
        ),
        settings=DispatcherSettings(
            stale_after_s=cfg.stale_after_s,
            in_flight_ttl_s=cfg.in_flight_ttl_s,
            tick_s=cfg.tick_s,
            positions_interval_s=cfg.positions_interval_s,
            leader_ttl_ms=cfg.leader_ttl_ms,
        ),
        stats=engine_samples,
        send=send_run,
        send_batch=send_runs,
        preempt=ask_runs_to_yield,
        on_positions=publish_positions,
        use_leader_lock=use_leader_lock,
        housekeeping=Housekeeping(),
        observer=DispatcherFigures(deployment=settings.ENGINE.served_model_name),
    )
