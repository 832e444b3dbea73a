"""The one way work and control signals reach the GPU workers."""

from __future__ import annotations

import logging

from django.conf import settings

from chatproject.celery import app
from chatproject.redis_client import get_redis
from runs.streams import cancel_channel, cancel_key

logger = logging.getLogger(__name__)

GENERATE_TASK = "inference_workers.generate"


def send_to_worker(*, run_id: int, queue: str) -> None:
    """Publishes ``generate(run_id)`` on the Celery queue of the run's tier (the workers drain them in order)."""
    if queue not in settings.CELERY_TASK_QUEUES_ORDER:
        raise ValueError(f"unknown worker queue {queue!r}")
    from inference_workers.affinity import route_run_or_tier_queue  # chat affinity: the previous worker's queue

    target, reason = route_run_or_tier_queue(run_id=run_id, tier_queue=queue)
    app.send_task(GENERATE_TASK, args=[run_id], queue=target)
    logger.info("run %s sent to queue %s (%s)", run_id, target, reason)


def signal_cancel(*, run_id: int) -> None:
    """Tells whichever worker streams ``run_id`` to abort it: a flag with a TTL, then a pub/sub nudge."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.set(cancel_key(run_id), "1", ex=settings.STREAMS.live_ttl_s)
    pipe.publish(cancel_channel(), str(run_id))
    pipe.execute()
