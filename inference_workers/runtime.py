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
from typing import Any

import redis
from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from core.config import EngineConfig, WorkerConfig
from core.redis_client import get_redis
from generation.worker_contract import (
    ENGINE_METRIC_FAMILY_PREFIX,
    EngineMetricsSnapshot,
    WorkerHeartbeat,
    WorkerState,
    cancel_channel,
    cancel_key,
    drop_heartbeat,
    engine_metrics_ttl_s,
    publish_engine_metrics,
    run_lease_key,
    write_heartbeat,
    yield_channel,
)
from inference_workers.engine.base import WARM_UP_REQUEST_PREFIX, GenerationRequest, InferenceEngine
from inference_workers.engine.host import EngineHost
from moderation.services import moderation_warm_up
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
    handoff_requested: threading.Event = field(default_factory=threading.Event)
    """Set when this worker drains past its deadline, or when the dispatcher preempts the run: the attempt stops
    and hands the run back to the queue, and the next attempt continues it from the tokens already streamed."""
    handoff_reason: str = "handoff"
    """Why, once ``handoff_requested`` is set: ``handoff`` (the drain) or ``preempted``."""


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
        deployment: str = "",
        state_of: Callable[[str, int], WorkerState] | None = None,
        drain_deadline_s: float = float("inf"),
        status_check_s: float = 2.0,
        warm_up: bool = True,
    ) -> None:
        """``deployment``: the ``name@version`` it serves (heartbeats, ready listing); ``state_of(deployment,
        active runs)``: what to report for it (read every ``status_check_s``; None: always ready); past
        ``drain_deadline_s`` of draining, its runs are handed on (``ActiveRun.handoff_requested``); ``warm_up``:
        one generation before the first heartbeat (off only where a test drives a stand-in engine)."""
        self.worker_name = worker_name
        self.deployment = deployment
        self.state_of = state_of
        self.state = WorkerState.READY
        self.drain_deadline_s = drain_deadline_s
        self.status_check_s = status_check_s
        self._state_checked_at = float("-inf")
        self._draining_since: float | None = None
        self.warm_up_enabled = warm_up
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
        self._last_seen: tuple[int, int, int, str] | None = None
        """(running, waiting, active runs, state) of the last heartbeat: the dispatcher is woken when they change."""
        self._beat_lock = threading.Lock()
        self.exit_process = exit_process
        self.host.on_dead = self._engine_died

    # lifecycle

    def start(self) -> None:
        self.host.start()
        if self.warm_up_enabled:
            self.warm_up()
            moderation_warm_up()  # the output pass's classifier: a first streamed answer does not wait for it
        self.beat()
        for target, name in ((self._heartbeat_loop, "worker-heartbeat"), (self._cancel_loop, "worker-cancel")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def warm_up(self) -> None:
        """One short generation on the new engine before the worker says it is ready: a worker that heartbeats
        ready has answered once (its first real run pays no first-request cost, and a broken engine never takes
        runs). Raises when the engine cannot answer: the worker does not start."""
        started = time.monotonic()
        request_id = f"{WARM_UP_REQUEST_PREFIX}{uuid.uuid4().hex[:8]}"
        request = GenerationRequest(request_id=request_id, prompt="Hello", max_tokens=2)
        tokens = sum(delta.new_tokens for delta in self.host.stream(request) if delta is not None)
        logger.info(
            "worker %s: warm-up generation answered %s tokens in %.2f s; ready for %s",
            self.worker_name,
            tokens,
            time.monotonic() - started,
            self.deployment or "any deployment",
        )

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        drop_heartbeat(self.worker_name, deployment=self.deployment, client=self.client)
        self.host.shutdown()

    def _engine_died(self, reason: str) -> None:
        """The engine is gone for good: stop advertising this worker and end the process (see the module doc)."""
        logger.critical("worker %s: the engine died (%s); stopping this worker", self.worker_name, reason)
        self._stop.set()  # no more heartbeats: the dispatcher stops counting these slots, leases lapse
        try:
            drop_heartbeat(self.worker_name, deployment=self.deployment, client=self.client)
        except redis.RedisError as exc:
            logger.warning("could not delete the heartbeat (%s); it expires by itself", exc)
        self.exit_process()

    # runs

    def claim(self, run_id: int) -> bool:
        """Takes the run's lease; False when another live attempt holds it (a duplicate delivery)."""
        return self.claim_with(run_id, reads=lambda pipe: None)[0]

    def claim_with(self, run_id: int, *, reads: Callable[[redis.client.Pipeline], None]) -> tuple[bool, list[Any]]:
        """:meth:`claim`, with what ``reads`` queues on the pipeline sent in the same round trip, after the lease's
        ``SET`` (so Redis reads them once the lease is taken, as a read after the claim would); returns whether the
        lease was taken and the replies of those reads (``inference_workers.services``: the run's stream)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(run_lease_key(run_id), self.lease_value, nx=True, ex=self.worker_config.heartbeat_ttl_s)
        reads(pipe)
        taken, *replies = pipe.execute()
        return bool(taken), replies

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

    @staticmethod
    def cancel_pending_in(pipe: redis.client.Pipeline, run_id: int) -> None:
        """:meth:`cancel_pending`'s read queued on ``pipe``, for a caller that sends it with other commands: its
        reply is non-zero when a cancel was signalled."""
        pipe.exists(cancel_key(run_id))

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

    def end_run(self, run_id: int) -> None:
        """A run's attempt is over on this worker: its lease back (:meth:`release`) and, in the same round trip, a
        heartbeat outside the loop: the run has just left the engine, and until the next beat (up to
        ``heartbeat_interval_s`` away) the dispatcher's gate would count its slot as taken. No heartbeat once the
        worker stops or its engine died (a worker that no longer advertises itself stays so). Never raises: a lease
        Redis did not release expires by itself within ``heartbeat_ttl_s``, and the loop's next beat says what this
        one would have."""
        if self._stop.is_set() or self.host.dead is not None:
            self.release(run_id)
            return
        try:
            with self._beat_lock:
                self._beat(leases=False, release=run_id)
        except redis.RedisError as exc:
            logger.warning("run %s: could not release its lease and beat (%s); it expires by itself", run_id, exc)
        except Exception:  # before anything was sent (the engine's figures): the lease alone, as without a beat
            logger.warning("heartbeat after a run failed", exc_info=True)
            self.release(run_id)

    def beat(self, *, leases: bool = True) -> None:
        """Writes the heartbeat and refreshes the leases of the runs in progress (thread-safe: the heartbeat
        thread and task threads whose run ended call it). ``leases=False``: the heartbeat alone, for the beat
        after a run: refreshing every run's lease at each run's end made a worker's Redis commands per run grow
        with its runs in flight (256 lease writes a run at 256 slots); the heartbeat thread's beats keep them."""
        with self._beat_lock:
            self._beat(leases=leases)

    def refresh_state(self) -> WorkerState:
        """Re-reads what to report for the deployment (every ``status_check_s``); past the drain deadline, asks
        every run still here to hand itself on. A failed read keeps the last state."""
        if self.state_of is None or time.monotonic() - self._state_checked_at < self.status_check_s:
            return self.state
        self._state_checked_at = time.monotonic()
        try:
            state = self.state_of(self.deployment, len(self.active_run_ids()))
        except Exception:
            logger.warning("worker %s: cannot read the state of %s", self.worker_name, self.deployment, exc_info=True)
            return self.state
        if state != self.state:
            logger.info("worker %s (%s): %s -> %s", self.worker_name, self.deployment, self.state, state)
        self.state = state
        if state == WorkerState.READY:
            self._draining_since = None
        elif self._draining_since is None:
            self._draining_since = time.monotonic()
        if state == WorkerState.DRAINING and time.monotonic() - (self._draining_since or 0) > self.drain_deadline_s:
            self.hand_off_all()
        return state

    def request_handoff(self, run_id: int, *, reason: str = "handoff") -> bool:
        """Asks the run's attempt here to stop and go on later (on another worker, after a drain; wherever the
        dispatcher sends it, after a preemption: ``reason`` ``preempted``); False if it is not generated here."""
        with self._lock:
            active = self._active.get(run_id)
        if active is None or active.handoff_requested.is_set():
            return False
        active.handoff_reason = reason
        active.handoff_requested.set()
        if reason == "preempted":
            logger.info("run %s: preempted; it yields its engine slot", run_id)
        return True

    def hand_off_all(self) -> None:
        """Asks each run still generating here to stop and go on elsewhere (from the tokens it streamed)."""
        with self._lock:
            active = list(self._active.values())
        for run in active:
            if not run.handoff_requested.is_set():
                logger.info("run %s: the drain deadline passed; handing it on", run.run_id)
                run.handoff_requested.set()

    def _beat(self, *, leases: bool = True, release: int | None = None) -> None:
        """``release``: a run whose lease goes back in the same round trip (:meth:`end_run`)."""
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
            deployment=self.deployment,
            state=self.state,
        )
        snapshot = self._engine_metrics_due(deployment=self.deployment or engine.model_name) if leases else None
        pipe = self.client.pipeline(transaction=False)
        if release is not None:
            pipe.eval(_RELEASE_LEASE, 1, run_lease_key(release), self.lease_value)
        write_heartbeat(beat, ttl_s=ttl, client=pipe)
        seen = (beat.running, beat.waiting, beat.active_runs, str(beat.state))
        if seen != self._last_seen:
            # What the dispatcher's gate reads changed: it looks again now, instead of polling for it.
            self._last_seen = seen
            wake_dispatcher(pipe)
        for run_id in self.active_run_ids() if leases else ():
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
                self.refresh_state()
                self.beat()
            except Exception:  # a Redis hiccup must not kill the heartbeat thread
                logger.exception("heartbeat failed")

    def _cancel_loop(self) -> None:
        while not self._stop.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(cancel_channel(), yield_channel())
                # Signals sent while (re)subscribing are still seen through the cancel keys.
                for run_id in self.active_run_ids():
                    if self.cancel_pending(run_id):
                        self.request_cancel(run_id)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if not message or not str(message.get("data", "")).isdigit():
                        continue
                    if str(message.get("channel", "")) == yield_channel():
                        self.request_handoff(int(message["data"]), reason="preempted")
                    else:
                        self.request_cancel(int(message["data"]))
            except Exception:  # reconnect after Redis errors
                logger.exception("cancel listener failed; resubscribing")
                time.sleep(1)
            finally:
                pubsub.close()


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def start_runtime(
    *,
    worker_name: str,
    engine: InferenceEngine | None = None,
    engine_config: EngineConfig | None = None,
    deployment: str = "",
    state_of: Callable[[str, int], WorkerState] | None = None,
) -> WorkerRuntime:
    """Builds this process's one engine (``engine_config``: the deployment's; None: the environment's), warms it
    up and starts reporting for ``deployment``; blocks until the engine has answered."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            runtime = WorkerRuntime(
                worker_name=worker_name,
                engine_config=engine_config or settings.ENGINE,
                worker_config=settings.WORKERS,
                engine=engine,
                deployment=deployment,
                state_of=state_of,
                drain_deadline_s=settings.DEPLOYMENTS.drain_deadline_s,
                status_check_s=settings.DEPLOYMENTS.status_check_s,
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
