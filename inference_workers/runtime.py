"""The per-process worker runtime: the engine host, the heartbeat thread and the cancel listener.

Built once per worker process at worker start (see :mod:`inference_workers.signals`) before the worker
consumes anything; Celery task threads reach it through :func:`get_runtime`. The heartbeat thread also copies
the engine's ``vllm:*`` metrics to Redis every ``WORKER_METRICS_PUBLISH_S`` for the web's ``/metrics``.

When the engine dies (vLLM's engine core exits: ``EngineDeadError``, unrecoverable) the process must not take
more runs: the runtime stops its heartbeat (the dispatcher stops counting its slots), drops its heartbeat key and
sends itself SIGTERM, a Celery warm shutdown; the supervisor (supervisord, compose) starts a fresh process with a
new engine. The runs that were in flight are left streaming, their leases released, and the reaper requeues them
(``WORKER_MAX_ATTEMPTS`` bounds a request that kills every engine it reaches).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import redis
from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from core.config import EngineConfig, WorkerConfig
from core.redis_client import get_redis
from core.worker_contract import (
    ENGINE_METRIC_FAMILY_PREFIX,
    EngineMetricsSnapshot,
    WorkerHeartbeat,
    cancel_channel,
    cancel_key,
    drop_heartbeat,
    engine_metrics_ttl_s,
    publish_engine_metrics,
    run_lease_key,
    write_heartbeat,
)
from inference_workers.engine.base import InferenceEngine
from inference_workers.engine.host import EngineHost
from scheduling.redis_store import wake_dispatcher

logger = logging.getLogger(__name__)

# Deletes the lease only if this worker still holds it (a later attempt elsewhere may have taken it).
_RELEASE_LEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class _EngineFamilies(Collector):
    """The engine's own families of a registry: vLLM registers them in the process's default registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return [m for m in self.registry.collect() if m.name.startswith(ENGINE_METRIC_FAMILY_PREFIX)]


def engine_metrics_text(registry: CollectorRegistry = REGISTRY) -> str:
    """The registry's ``vllm:*`` families in Prometheus' text format ("" when the engine registers none, as the
    simulated engine does)."""
    return generate_latest(_EngineFamilies(registry)).decode()


@dataclass
class ActiveRun:
    run_id: int
    attempt: int
    request_id: str
    cancel_requested: threading.Event = field(default_factory=threading.Event)


def terminate_process() -> None:
    """SIGTERM to this process: a Celery worker shuts down warm (it stops consuming, lets its task threads end
    and gives back the messages it had not started); a plain script exits."""
    os.kill(os.getpid(), signal.SIGTERM)


class WorkerRuntime:
    def __init__(
        self,
        *,
        worker_name: str,
        engine_config: EngineConfig,
        worker_config: WorkerConfig,
        engine: InferenceEngine | None = None,
        client: redis.Redis | None = None,
        metrics_registry: CollectorRegistry = REGISTRY,
        exit_process: Callable[[], None] = terminate_process,
    ) -> None:
        self.worker_name = worker_name
        self.lease_value = f"{worker_name}/{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.worker_config = worker_config
        self.host = EngineHost(engine_config, engine)
        self.client = client or get_redis()
        self._active: dict[int, ActiveRun] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.metrics_registry = metrics_registry
        self._metrics_published_at = float("-inf")
        self._last_seen: tuple[int, int, int] | None = None
        """(running, waiting, active runs) of the last heartbeat: the dispatcher is woken when they change."""
        self._beat_lock = threading.Lock()
        self.exit_process = exit_process
        self.host.on_dead = self._engine_died

    # lifecycle

    def start(self) -> None:
        self.host.start()
        self.beat()
        for target, name in ((self._heartbeat_loop, "worker-heartbeat"), (self._cancel_loop, "worker-cancel")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        drop_heartbeat(self.worker_name, client=self.client)
        self.host.shutdown()

    def _engine_died(self, reason: str) -> None:
        """The engine is gone for good: stop advertising this worker and end the process (see the module doc)."""
        logger.critical("worker %s: the engine died (%s); stopping this worker", self.worker_name, reason)
        self._stop.set()  # no more heartbeats: the dispatcher stops counting these slots, leases lapse
        try:
            drop_heartbeat(self.worker_name, client=self.client)
        except redis.RedisError as exc:
            logger.warning("could not delete the heartbeat (%s); it expires by itself", exc)
        self.exit_process()

    # runs

    def claim(self, run_id: int) -> bool:
        """Takes the run's lease; False when another live attempt holds it (a duplicate delivery)."""
        return bool(
            self.client.set(run_lease_key(run_id), self.lease_value, nx=True, ex=self.worker_config.heartbeat_ttl_s)
        )

    def release(self, run_id: int) -> None:
        """Gives the run's lease back. Redis not answering is logged, not raised: the lease then expires by
        itself within ``heartbeat_ttl_s`` (nothing refreshes it any more), and the run's outcome stands."""
        try:
            self.client.eval(_RELEASE_LEASE, 1, run_lease_key(run_id), self.lease_value)
        except redis.RedisError as exc:
            logger.warning("run %s: could not release its lease (%s); it expires by itself", run_id, exc)

    def holds(self, run_id: int) -> bool:
        """Whether this process still holds the run's lease (it may have expired while Redis was unreachable)."""
        return self.client.get(run_lease_key(run_id)) == self.lease_value

    def register(self, *, run_id: int, attempt: int) -> ActiveRun:
        active = ActiveRun(run_id=run_id, attempt=attempt, request_id=f"run-{run_id}-{attempt}")
        with self._lock:
            self._active[run_id] = active
        return active

    def cancel_pending(self, run_id: int) -> bool:
        """True if a cancel was signalled for the run (covers a signal sent before the listener saw it)."""
        return bool(self.client.exists(cancel_key(run_id)))

    def unregister(self, run_id: int) -> None:
        with self._lock:
            self._active.pop(run_id, None)

    def request_cancel(self, run_id: int) -> bool:
        """Aborts the run's engine request if this process is generating it."""
        with self._lock:
            active = self._active.get(run_id)
        if active is None:
            return False
        active.cancel_requested.set()
        self.host.abort(active.request_id)
        logger.info("run %s: abort requested", run_id)
        return True

    def active_run_ids(self) -> list[int]:
        with self._lock:
            return list(self._active)

    # background threads

    def beat_after_run(self) -> None:
        """A heartbeat now, outside the loop: a run has just left the engine, and until the next beat (up to
        ``heartbeat_interval_s`` away) the dispatcher's gate would count its slot as taken. Never raises.
        Nothing once the worker stops or its engine died: a worker that no longer advertises itself stays so."""
        if self._stop.is_set() or self.host.dead is not None:
            return
        try:
            self.beat()
        except Exception:  # the run has ended either way; the loop's next beat says the same
            logger.warning("heartbeat after a run failed", exc_info=True)

    def beat(self) -> None:
        """Writes the heartbeat and refreshes the leases of the runs in progress (thread-safe: the heartbeat
        thread and task threads whose run ended call it)."""
        with self._beat_lock:
            self._beat()

    def _beat(self) -> None:
        stats = self.host.stats()
        engine = self.host.engine
        ttl = self.worker_config.heartbeat_ttl_s
        beat = WorkerHeartbeat(
            worker=self.worker_name,
            model=engine.model_name,
            model_version=engine.model_version,
            max_slots=engine.max_num_seqs,
            running=stats.running,
            waiting=stats.waiting,
            kv_cache_usage=stats.kv_cache_usage,
            tpot_s=stats.tpot_s,
            active_runs=len(self.active_run_ids()),
            updated_at=time.time(),
            prefix_cache_queries=stats.prefix_cache_queries,
            prefix_cache_hits=stats.prefix_cache_hits,
            stats_at=stats.updated_at,
        )
        snapshot = self._engine_metrics_due(deployment=engine.model_name)
        pipe = self.client.pipeline(transaction=False)
        write_heartbeat(beat, ttl_s=ttl, client=pipe)
        seen = (beat.running, beat.waiting, beat.active_runs)
        if seen != self._last_seen:
            # What the dispatcher's gate reads changed: it looks again now, instead of polling for it.
            self._last_seen = seen
            wake_dispatcher(pipe)
        for run_id in self.active_run_ids():
            pipe.set(run_lease_key(run_id), self.lease_value, ex=ttl, xx=True)
        if snapshot is not None:
            publish_engine_metrics(snapshot, ttl_s=engine_metrics_ttl_s(self.worker_config), client=pipe)
        pipe.execute()

    def _engine_metrics_due(self, *, deployment: str) -> EngineMetricsSnapshot | None:
        """The engine's metrics when a publication is due (every ``metrics_publish_s``, riding on the heartbeat
        so no thread of its own); None when not due, off, or the engine has none. Never raises: a broken
        exposition must not cost the heartbeat."""
        interval = self.worker_config.metrics_publish_s
        now = time.monotonic()
        if interval <= 0 or now - self._metrics_published_at < interval:
            return None
        self._metrics_published_at = now
        try:
            text = engine_metrics_text(self.metrics_registry)
        except Exception:
            logger.exception("engine metrics: rendering failed; not published")
            return None
        if not text:
            return None
        return EngineMetricsSnapshot(
            worker=self.worker_name, deployment=deployment, published_at=time.time(), text=text
        )

    def _heartbeat_loop(self) -> None:
        interval = self.worker_config.heartbeat_interval_s
        while not self._stop.wait(interval):
            try:
                self.beat()
            except Exception:  # a Redis hiccup must not kill the heartbeat thread
                logger.exception("heartbeat failed")

    def _cancel_loop(self) -> None:
        while not self._stop.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(cancel_channel())
                # Signals sent while (re)subscribing are still seen through the cancel keys.
                for run_id in self.active_run_ids():
                    if self.cancel_pending(run_id):
                        self.request_cancel(run_id)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message and str(message.get("data", "")).isdigit():
                        self.request_cancel(int(message["data"]))
            except Exception:  # reconnect after Redis errors
                logger.exception("cancel listener failed; resubscribing")
                time.sleep(1)
            finally:
                pubsub.close()


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def start_runtime(*, worker_name: str, engine: InferenceEngine | None = None) -> WorkerRuntime:
    """Builds this process's one engine and starts reporting; blocks until the engine is ready."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            runtime = WorkerRuntime(
                worker_name=worker_name,
                engine_config=settings.ENGINE,
                worker_config=settings.WORKERS,
                engine=engine,
            )
            runtime.start()
            _runtime = runtime
        return _runtime


def get_runtime() -> WorkerRuntime:
    if _runtime is None:
        raise RuntimeError("this process has no engine: generate() runs only inside a started worker")
    return _runtime


def stop_runtime() -> None:
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            _runtime.stop()
            _runtime = None
