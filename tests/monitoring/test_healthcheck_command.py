"""``manage.py healthcheck``: what compose's health checks run in each container."""

from __future__ import annotations

import time

import pytest
import redis
from django.core.management import CommandError, call_command

from bench.lib.processes import free_port
from generation.worker_contract import WorkerHeartbeat, write_heartbeat
from runs.dispatcher_figures import STATE_KEY


def test_worker_is_healthy_only_while_it_heartbeats(clean_redis: redis.Redis) -> None:
    with pytest.raises(CommandError, match="no heartbeat from worker@box"):
        call_command("healthcheck", "worker", "--worker", "worker@box")
    beat = WorkerHeartbeat(
        worker="worker@box", model="m", model_version="", max_slots=4, running=0, waiting=0,
        kv_cache_usage=0.0, tpot_s=None, active_runs=0, updated_at=time.time(),
    )  # fmt: skip
    write_heartbeat(beat, ttl_s=10, client=clean_redis)
    call_command("healthcheck", "worker", "--worker", "worker@box")


def test_dispatcher_is_healthy_only_while_it_writes_its_state(clean_redis: redis.Redis) -> None:
    with pytest.raises(CommandError, match="dispatcher"):
        call_command("healthcheck", "dispatcher")
    clean_redis.hset(STATE_KEY, "gate|pro|m", 1)
    call_command("healthcheck", "dispatcher")


def test_web_is_unhealthy_when_nothing_answers() -> None:
    with pytest.raises(CommandError, match="did not answer"):
        call_command("healthcheck", "web", "--port", str(free_port()))
