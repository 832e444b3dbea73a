"""What a GPU worker consumes: its deployment's tier queues, and its own queue (``worker.<name>``, chat affinity).

The command line names the plain tier queues (``-Q pro,plus,free,batch``: "this is a GPU worker"); each becomes
the worker's deployment's (``pro.name@version``...), in the same order. A worker of the default deployment also
keeps the plain ones after them (runs queued before deployments were versioned). The web side routes a run to a
worker's own queue when that worker served the chat's previous turn (``runs.routing``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import celeryd_after_setup
from django.conf import settings

from generation.worker_contract import deployment_queue
from inference_workers.deployment import worker_deployment
from scheduling.affinity import worker_queue

logger = logging.getLogger(__name__)


@celeryd_after_setup.connect(dispatch_uid="inference_workers.consume_own_queue")
def consume_own_queue(sender: str, instance: Any, **kwargs: Any) -> None:
    """A GPU worker (one consuming the tier queues) consumes its deployment's and the queue of runs pinned to it."""
    queues = instance.app.amqp.queues
    consumed = list(queues.consume_from or queues)
    tiers = [name for name in settings.CELERY_TASK_QUEUES_ORDER if name in consumed]
    if not tiers:
        return
    served = worker_deployment(sender)
    names = [deployment_queue(tier, served.key) for tier in tiers]
    if served.is_default:
        names += tiers
    names += [n for n in consumed if n not in tiers and n not in names] + [worker_queue(sender)]
    for name in names:
        if name not in queues:
            queues.add(name)
    queues.select(names)
    logger.info("worker %s consumes %s", sender, ", ".join(names))
