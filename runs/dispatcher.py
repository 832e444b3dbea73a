"""Builds the dispatcher with the Django-side pieces: tiers from the database, worker heartbeats,
``send_to_worker`` (the only way into Celery) and queue-position status events on the runs' streams."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from accounts.models import Tier
from chatproject.redis_client import get_redis
from runs.admission import get_scheduler_store, run_enqueue
from runs.models import Run, RunStatus
from runs.streams import RunStreamWriter, StreamEvent
from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy, TierGate
from scheduling.policy import FairPolicy, QueuedRun, TierSpec
from scheduling.store import Position, SchedulerStore

logger = logging.getLogger(__name__)

DEFAULT_GATE = TierGate(max_waiting=1, max_tpot_s=1.0)


def engine_samples() -> list[EngineSample]:
    """The workers' latest heartbeats as the gate's samples (empty when no worker reports)."""
    try:
        from inference_workers.selectors import worker_heartbeats
    except ImportError:  # a web-only checkout without the worker app
        return []
    return [
        EngineSample(
            slots=hb.max_slots,
            running=hb.running,
            waiting=hb.waiting,
            tpot_s=hb.tpot_s,
            updated_at=hb.updated_at,
            stats_at=hb.stats_at,
        )
        for hb in worker_heartbeats()
    ]


def send_run(run: QueuedRun) -> None:
    from inference_workers.dispatch import send_to_worker

    send_to_worker(run_id=run.run_id, queue=run.tier)


def publish_positions(positions: dict[int, Position]) -> None:
    """A ``status`` event on each run's stream whose position or estimated wait changed."""
    client = get_redis()
    for run_id, pos in positions.items():
        RunStreamWriter(run_id, client=client).append(
            StreamEvent.STATUS,
            {"status": "queued", "queue_position": pos.queue_position, "estimated_wait_s": pos.estimated_wait_s},
        )


def requeue_lost_runs(*, older_than_s: float = 30.0, limit: int = 500) -> list[int]:
    """Queued runs that are neither in the scheduler queue nor in flight go back in the queue.

    Their push was lost: Redis was unreachable when the run committed, Redis lost its data, or the run's
    in-flight entry expired (``SCHED_IN_FLIGHT_TTL_S``) without the run ever starting (a lost Celery message).
    """
    store = get_scheduler_store()
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    lost = []
    runs = Run.objects.filter(status=RunStatus.QUEUED, created_at__lt=cutoff).select_related(
        "user", "tier", "user_message"
    )
    for run in runs.order_by("created_at")[:limit]:
        if not store.is_queued_or_in_flight(run.pk, run.tier.name):
            logger.warning("run %s was queued in Postgres but not in the scheduler: queueing it again", run.pk)
            run_enqueue(run=run)
            lost.append(run.pk)
    return lost


def housekeeping() -> None:
    """The leader's periodic repairs: runs whose push was lost, and runs whose worker died mid-stream."""
    from inference_workers.services import reap_orphaned_runs

    requeue_lost_runs()
    reap_orphaned_runs()


def build_dispatcher(*, use_leader_lock: bool = True) -> Dispatcher:
    cfg = settings.SCHEDULER
    tiers = list(Tier.objects.order_by("priority"))
    gates = {t.name: cfg.gates.get(t.name, DEFAULT_GATE) for t in tiers}
    return Dispatcher(
        store=SchedulerStore(get_redis(), tiers=[t.name for t in tiers]),
        policy=FairPolicy(TierSpec(name=t.name, priority=t.priority, share_floor=t.share_floor) for t in tiers),
        gate=GatePolicy(
            gates=gates,
            fallback_max_in_flight=cfg.fallback_max_in_flight,
            idle_running_fraction=cfg.idle_running_fraction,
            headroom_slots=cfg.headroom_slots,
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
        on_positions=publish_positions,
        use_leader_lock=use_leader_lock,
        housekeeping=housekeeping,
    )
