"""vLLM's prefix-cache counters travel from its scheduler statistics into the worker's heartbeat."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from core.redis_client import get_redis
from generation.worker_contract import (
    LIVE_WORKERS_KEY,
    WorkerHeartbeat,
    drop_heartbeat,
    heartbeat_key,
    live_worker_names,
    run_lease_key,
    worker_heartbeats,
    write_heartbeat,
)
from inference_workers.engine.base import EngineStats, EngineTiming
from inference_workers.engine.vllm_engine import _make_stat_logger, _StatsSink, engine_timing
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.models import RunStatus
from scheduling.store import WAKE_KEY
from tests.factories import RunFactory


def _scheduler_stats(*, queries: int, hits: int, running: int = 1) -> object:
    from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats

    prefix = PrefixCacheStats()
    prefix.record(num_tokens=queries, num_hits=hits, preempted=False)
    return SchedulerStats(num_running_reqs=running, prefix_cache_stats=prefix)


def test_the_stat_logger_sums_vllms_per_step_prefix_cache_counts() -> None:
    sink = _StatsSink()
    logger = _make_stat_logger(sink)(vllm_config=None)

    logger.record(scheduler_stats=_scheduler_stats(queries=300, hits=256), iteration_stats=None)
    logger.record(scheduler_stats=_scheduler_stats(queries=0, hits=0, running=2), iteration_stats=None)
    logger.record(scheduler_stats=_scheduler_stats(queries=150, hits=0), iteration_stats=None)
    logger.record(scheduler_stats=None, iteration_stats=None)

    stats = sink.snapshot()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (450, 256)
    assert stats.running == 1


def test_the_heartbeat_carries_the_engines_prefix_cache_counters(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sim_runtime.host, "stats", lambda: EngineStats(running=1, prefix_cache_queries=1_000, prefix_cache_hits=640)
    )
    sim_runtime.beat()
    [beat] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    assert (beat.prefix_cache_queries, beat.prefix_cache_hits, beat.running) == (1_000, 640, 1)


def test_a_heartbeat_written_without_the_counters_still_reads() -> None:
    """A worker of the previous release writes no prefix-cache fields; readers must not fail on it."""
    old = {
        "worker": "old@host",
        "model": "m",
        "model_version": "v",
        "max_slots": 4,
        "running": 0,
        "waiting": 0,
        "kv_cache_usage": 0.0,
        "tpot_s": None,
        "active_runs": 0,
        "updated_at": 1.0,
    }
    beat = WorkerHeartbeat.from_json(json.dumps(old))
    assert (beat.prefix_cache_queries, beat.prefix_cache_hits) == (0, 0)
    assert heartbeat_key(beat.worker) == "worker:heartbeat:old@host"


def test_the_figures_keep_the_time_vllm_measured_them_and_the_heartbeat_carries_it(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During a long engine step no statistics arrive: a later snapshot must not look newer than its figures."""
    from inference_workers.engine import vllm_engine

    sink = _StatsSink()
    logger = _make_stat_logger(sink)(vllm_config=None)
    monkeypatch.setattr(vllm_engine.time, "time", lambda: 500.0)
    logger.record(scheduler_stats=_scheduler_stats(queries=0, hits=0, running=2), iteration_stats=None)
    monkeypatch.setattr(vllm_engine.time, "time", lambda: 500.4)
    logger.record(scheduler_stats=_scheduler_stats(queries=0, hits=0, running=3), iteration_stats=None)
    monkeypatch.setattr(vllm_engine.time, "time", lambda: 509.0)
    logger.record(scheduler_stats=None, iteration_stats=None)  # no scheduler figures: their time stays
    # The step that ended at 500.4 began at about 500.0: requests submitted since are not in its figures.
    assert (sink.snapshot().running, sink.snapshot().updated_at) == (3, 500.0)
    monkeypatch.undo()

    monkeypatch.setattr(sim_runtime.host, "stats", lambda: EngineStats(running=3, updated_at=123.0))
    sim_runtime.beat()
    [beat] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    assert beat.stats_at == 123.0 and beat.updated_at > beat.stats_at
    assert WorkerHeartbeat.from_json(json.dumps({**json.loads(beat.to_json()), "stats_at": None})).stats_at is None


def test_vllms_request_timestamps_split_the_wait_for_the_first_token() -> None:
    from vllm.v1.metrics.stats import RequestStateStats

    stats = RequestStateStats(queued_ts=100.5, scheduled_ts=101.25, first_token_ts=102.0, num_preemptions=1)
    timing = engine_timing(stats, submitted=100.0, received=102.125)
    assert timing == EngineTiming(submit_s=0.5, waiting_s=0.75, prefill_s=0.75, output_s=0.125, preemptions=1)
    assert timing.as_fields()["engine_waiting_s"] == 0.75
    # Not all stamped yet (or stats logging off): no split rather than a wrong one.
    assert engine_timing(RequestStateStats(queued_ts=100.5), submitted=100.0, received=101.0) is None
    assert engine_timing(None, submitted=100.0, received=101.0) is None


def test_the_step_token_budget_is_bounded_on_cpu_unless_configured() -> None:
    import dataclasses

    from django.conf import settings
    from vllm.platforms import current_platform

    from inference_workers.engine.vllm_engine import CPU_STEP_TOKEN_BUDGET, step_token_budget

    auto = dataclasses.replace(settings.ENGINE, max_num_batched_tokens=0)
    assert step_token_budget(auto) == (CPU_STEP_TOKEN_BUDGET if current_platform.is_cpu() else None)
    assert step_token_budget(dataclasses.replace(auto, max_num_batched_tokens=4096)) == 4096


def _beat(worker: str, *, updated_at: float) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker=worker, model="m", model_version="", max_slots=4, running=0, waiting=0,
        kv_cache_usage=0.0, tpot_s=None, active_runs=0, updated_at=updated_at,
    )  # fmt: skip


@pytest.mark.usefixtures("clean_redis")
def test_the_live_workers_are_read_from_their_listing_not_a_scan_and_an_expired_one_drops_out() -> None:
    client = get_redis()
    now = time.time()
    write_heartbeat(_beat("gone@host", updated_at=now - 60), ttl_s=10, client=client)  # expired 50 s ago
    client.set(heartbeat_key("gone@host"), "{}")  # even were its key still there, it is not listed as live
    write_heartbeat(_beat("live@host", updated_at=now), ttl_s=10, client=client)
    assert live_worker_names() == ["live@host"]
    assert [b.worker for b in worker_heartbeats()] == ["live@host"]
    assert client.zscore(LIVE_WORKERS_KEY, "gone@host") is None  # the live worker's beat dropped the listing
    client.set(heartbeat_key("unlisted@host"), _beat("unlisted@host", updated_at=now).to_json(), ex=10)
    assert [b.worker for b in worker_heartbeats()] == ["live@host"]  # a key alone is no live worker
    drop_heartbeat("live@host")
    assert worker_heartbeats() == [] and client.get(heartbeat_key("live@host")) is None


def test_a_heartbeat_wakes_the_dispatcher_only_when_the_engines_counts_changed(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = get_redis()
    counts = {"running": 1}
    monkeypatch.setattr(sim_runtime.host, "stats", lambda: EngineStats(running=counts["running"]))
    sim_runtime.beat()
    client.delete(WAKE_KEY)
    sim_runtime.beat()
    assert client.llen(WAKE_KEY) == 0  # nothing the gate reads changed: no wake, the dispatcher sleeps on
    counts["running"] = 0  # a run left the engine
    sim_runtime.beat()
    assert client.llen(WAKE_KEY) == 1
    client.delete(WAKE_KEY)


@pytest.mark.django_db(transaction=True)
def test_a_run_that_ends_is_followed_by_a_heartbeat_at_once_that_wakes_the_dispatcher(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate reads slots from heartbeats: without this one a freed slot stayed taken for up to a second."""
    client = get_redis()
    run = RunFactory.create(max_tokens=4)
    with monkeypatch.context() as patch:  # the last regular beat saw a run in the engine
        patch.setattr(sim_runtime.host, "stats", lambda: EngineStats(running=1))
        sim_runtime.beat()
    [before] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    client.delete(WAKE_KEY)
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    [after] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    assert after.updated_at > before.updated_at and (after.running, after.active_runs) == (0, 0)
    assert client.llen(WAKE_KEY) == 1  # its slot is free: the dispatcher looks again now
    client.delete(WAKE_KEY)


@pytest.mark.django_db(transaction=True)
def test_the_beat_after_a_run_is_the_heartbeat_alone_and_the_regular_beat_keeps_the_leases(
    sim_runtime: WorkerRuntime,
) -> None:
    """Refreshing every run's lease at each run's end made the Redis commands per run grow with the runs in flight;
    the regular beat refreshes them."""
    client = get_redis()
    sim_runtime.register(run_id=999_001, attempt=1)  # another run, still generating here
    try:
        client.set(run_lease_key(999_001), sim_runtime.lease_value, ex=2)
        client.delete(WAKE_KEY)
        sim_runtime.end_run(999_005)  # a run that ended here
        assert 0 < client.ttl(run_lease_key(999_001)) <= 2  # not refreshed
        [beat] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
        assert beat.active_runs == 1 and client.llen(WAKE_KEY) == 1  # the heartbeat itself went out
        sim_runtime.beat()
        assert client.ttl(run_lease_key(999_001)) > 2
    finally:
        sim_runtime.unregister(999_001)
        client.delete(run_lease_key(999_001), WAKE_KEY)


@pytest.mark.django_db(transaction=True)
def test_a_runs_lease_goes_back_with_the_heartbeat_after_it_in_one_round_trip(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch, redis_round_trips: Callable[[], list[str]]
) -> None:
    client = get_redis()
    assert sim_runtime.claim(999_002)
    other = "another-worker"
    client.set(run_lease_key(999_003), other)  # a lease this worker does not hold stays
    client.delete(WAKE_KEY)
    with monkeypatch.context() as patch:  # the last beat saw a run in the engine: this one wakes the dispatcher
        patch.setattr(sim_runtime.host, "stats", lambda: EngineStats(running=1))
        sim_runtime.beat()
    client.delete(WAKE_KEY)
    [earlier] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    before = earlier.updated_at
    sent = redis_round_trips()
    sim_runtime.end_run(999_002)
    sim_runtime.end_run(999_003)
    assert len(sent) == 2 and all(trip.startswith("EVAL SET") for trip in sent), sent
    assert client.exists(run_lease_key(999_002)) == 0
    assert client.get(run_lease_key(999_003)) == other
    [after] = [b for b in worker_heartbeats() if b.worker == sim_runtime.worker_name]
    assert after.updated_at > before and client.llen(WAKE_KEY) == 1
    client.delete(run_lease_key(999_003), WAKE_KEY)


@pytest.mark.django_db(transaction=True)
def test_a_runs_lease_goes_back_when_the_beat_after_it_cannot_be_built(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sim_runtime.claim(999_004)

    def broken() -> EngineStats:
        raise RuntimeError("no figures")

    monkeypatch.setattr(sim_runtime.host, "stats", broken)
    sim_runtime.end_run(999_004)
    assert get_redis().exists(run_lease_key(999_004)) == 0
