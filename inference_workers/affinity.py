"""Chat affinity on the worker side: each GPU worker also consumes its own queue (``worker.<name>``).

The web side routes a run there when the worker served the chat's previous turn (``runs.routing``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import celeryd_after_setup
from django.conf import settings

from scheduling.affinity import worker_queue

logger = logging.getLogger(__name__)


@celeryd_after_setup.connect(dispatch_uid="inference_workers.consume_own_queue")
def consume_own_queue(sender: str, instance: Any, **kwargs: Any) -> None:
    """A GPU worker (one consuming the tier queues) also consumes the queue of runs pinned to it."""
    queues = instance.app.amqp.queues
    consumed = set(queues.consume_from or queues)
    if not consumed & set(settings.CELERY_TASK_QUEUES_ORDER):
        return
    queues.select_add(worker_queue(sender))
    logger.info("worker %s also consumes %s (chat affinity)", sender, worker_queue(sender))
