"""Chat affinity: send a chat's next turn to the worker that served its previous one.

That worker's vLLM engine still holds the chat's prompt prefix in its prefix cache (system prompt, summary,
earlier turns), so prefill there is mostly a cache hit; on any other worker the whole prompt is computed
again. Affinity is only a preference: a worker that is full (or silent) is passed over, and the run goes to
the shared tier queue where any worker takes it. Pure policy, no Django: the caller passes the workers' load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WORKER_QUEUE_PREFIX = "worker."


def worker_queue(worker: str) -> str:
    """The Celery queue only ``worker`` consumes (besides the shared tier queues)."""
    return f"{WORKER_QUEUE_PREFIX}{worker}"


@dataclass(frozen=True)
class WorkerLoad:
    """One worker's load as its latest heartbeat reported it."""

    name: str
    slots: int
    running: int
    waiting: int
    updated_at: float
    deployment: str = ""
    """The ``name@version`` it serves: a run goes to its chat's previous worker only if that is the run's."""


@dataclass(frozen=True)
class Route:
    queue: str
    worker: str | None
    """The worker the run is pinned to; None when any worker may take it."""
    reason: str
    """``affinity``, ``no_previous_worker``, ``previous_worker_gone`` or ``previous_worker_full``."""


def has_room(load: WorkerLoad, *, pending: int = 0, max_waiting: int = 0) -> bool:
    """Fewer sequences than slots (plus ``max_waiting`` tolerated in its queue), counting ``pending`` runs."""
    return load.running + load.waiting + pending < load.slots + max_waiting


def choose_route(
    *,
    previous_worker: str,
    tier_queue: str,
    workers: Sequence[WorkerLoad],
    now: float,
    stale_after_s: float,
    pending: Mapping[str, int] | None = None,
    max_waiting: int = 0,
) -> Route:
    """The previous worker's own queue when it is alive and has room, else the shared tier queue.

    ``pending`` counts runs already routed to a worker since its heartbeat (they are not in its numbers yet).
    """
    if not previous_worker:
        return Route(queue=tier_queue, worker=None, reason="no_previous_worker")
    load = next((w for w in workers if w.name == previous_worker), None)
    if load is None or now - load.updated_at > stale_after_s:
        return Route(queue=tier_queue, worker=None, reason="previous_worker_gone")
    if not has_room(load, pending=(pending or {}).get(previous_worker, 0), max_waiting=max_waiting):
        return Route(queue=tier_queue, worker=None, reason="previous_worker_full")
    return Route(queue=worker_queue(previous_worker), worker=previous_worker, reason="affinity")
