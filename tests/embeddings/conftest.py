"""A live web process and an embedding worker (``manage.py run_embedding_worker``) on the test database and Redis."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from bench.lib.processes import stop_process_group, wait_http
from tests.deployment_helpers import mark_ready_worker
from tests.embeddings.helpers import (
    embedding_deployment_state,
    ensure_embedding_deployment,
    restore_embedding_deployment,
)
from tests.live_stack import ROOT, LiveStack, _free_port, _spawn, _stack_env, _wait_log, web_argv

WORKER = "embed@tests"


@pytest.fixture(scope="package", name="embedding_stack")
def embedding_stack_fixture(django_db_setup: None, django_db_blocker: object) -> Iterator[LiveStack]:
    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        seed_default_tiers(Tier)
        before = embedding_deployment_state()
        ensure_embedding_deployment()
    env = _stack_env({"EMBEDDING_TIMEOUT_S": "60"})
    port = _free_port()
    processes = {}
    try:
        processes["embed-web"] = _spawn("embed-web", web_argv(port), env)
        processes["embed-worker"] = _spawn(
            "embed-worker", [sys.executable, str(ROOT / "manage.py"), "run_embedding_worker", "--name", WORKER], env
        )
        base_url = f"http://127.0.0.1:{port}"
        wait_http(base_url + "/healthz", processes["embed-web"], timeout_s=120, what="the web process")
        _wait_log("embed-worker", processes["embed-worker"], " serves ", timeout_s=180)
        yield LiveStack(base_url=base_url, processes=processes)
    finally:
        for proc in processes.values():
            stop_process_group(proc)
        with django_db_blocker.unblock():  # type: ignore[attr-defined]
            restore_embedding_deployment(before)


@pytest.fixture(autouse=True)
def embedding_deployment(request: pytest.FixtureRequest) -> None:
    """Transactional tests flush every table: the embedding deployment comes back (same id) before each test."""
    if "embedding_stack" in request.fixturenames or request.node.get_closest_marker("django_db"):
        request.getfixturevalue("default_tiers")
        row = ensure_embedding_deployment()
        if "embedding_stack" in request.fixturenames:  # each test flushes Redis: the worker's marker comes back
            mark_ready_worker(row.key, worker=WORKER, ttl_s=10)  # at its next beat; until then, this one stands
