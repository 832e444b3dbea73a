"""Redis keys a worker keeps alive: its heartbeat (engine load) and a lease per run it is generating."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

HEARTBEAT_PREFIX = "worker:heartbeat:"


def heartbeat_key(worker: str) -> str:
    return f"{HEARTBEAT_PREFIX}{worker}"


def run_lease_key(run_id: int) -> str:
    """Held (with a short TTL, refreshed with the heartbeat) by the worker generating the run."""
    return f"run:{run_id}:lease"


@dataclass(frozen=True)
class WorkerHeartbeat:
    worker: str
    model: str
    model_version: str
    max_slots: int
    running: int
    waiting: int
    kv_cache_usage: float
    tpot_s: float | None
    """Recent time per output token in seconds; None when nothing decoded lately."""
    active_runs: int
    """Runs this worker's task threads are generating (from Celery's side, including queued in vLLM)."""
    updated_at: float
    """Unix time of the write."""
    prefix_cache_queries: int = 0
    """Prompt tokens the engine looked up in its prefix cache since it started (cumulative, like vLLM's counter)."""
    prefix_cache_hits: int = 0
    """Of those, tokens served from the prefix cache; the hit rate over a period is Δhits / Δqueries."""
    stats_at: float | None = None
    """Unix time the engine measured running/waiting (its last step; older than ``updated_at`` during a long
    step): the dispatcher counts runs sent after it as not yet visible in them."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> WorkerHeartbeat:
        return cls(**json.loads(raw))

    def age_s(self, now: float | None = None) -> float:
        return (now if now is not None else time.time()) - self.updated_at
