"""The answer cache's tests: a fresh process index per test, caught up on every lookup, and (for the tests where
the embedding is the point) a real embedding worker (``manage.py run_embedding_worker``) on the test database and
Redis."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from answer_cache.index import reset_process_index
from bench.lib.processes import stop_process_group
from tests.embeddings.helpers import (
    embedding_deployment_state,
    ensure_embedding_deployment,
    restore_embedding_deployment,
)
from tests.live_stack import ROOT, _spawn, _stack_env, _wait_log

WORKER = "embed@answer-cache-tests"


@pytest.fixture(autouse=True)
def fresh_index(settings: Any) -> Iterator[None]:
    """Each test starts with an empty index in this process that catches up before every lookup (production: at
    most every ``ANSWER_CACHE_SYNC_MS``)."""
    settings.ANSWER_CACHE = dataclasses.replace(settings.ANSWER_CACHE, sync_ms=0, embed_timeout_s=30.0)
    reset_process_index()
    yield
    reset_process_index()


@pytest.fixture(scope="package")
def embedding_worker_process(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers

    with django_db_blocker.unblock():
        seed_default_tiers(Tier)
        before = embedding_deployment_state()
        ensure_embedding_deployment()
    env = _stack_env({"EMBEDDING_TIMEOUT_S": "60"})
    proc = _spawn(
        "cache-embed-worker", [sys.executable, str(ROOT / "manage.py"), "run_embedding_worker", "--name", WORKER], env
    )
    try:
        _wait_log("cache-embed-worker", proc, " serves ", timeout_s=180)
        yield
    finally:
        stop_process_group(proc)
        with django_db_blocker.unblock():
            restore_embedding_deployment(before)


@pytest.fixture
def embedding_worker(embedding_worker_process: None, db: None) -> None:
    """The real embedding worker, listed ready (each test flushes Redis; the worker's next beat lists it again)."""
    from tests.deployment_helpers import mark_ready_worker

    row = ensure_embedding_deployment()
    mark_ready_worker(row.key, worker=WORKER, ttl_s=10)
