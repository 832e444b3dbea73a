"""Fixtures of the run tests: two real uvicorn web processes for the SSE stream tests, and a run's owner."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from rest_framework.authtoken.models import Token

from accounts.models import User
from bench.lib.processes import child_env, free_port, wait_http
from tests.factories import UserFactory
from tests.runs.stream_helpers import LOGS, start_web, stop_all


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[str, str]]:
    """Two uvicorn processes on the test database and the test Redis db; yields their base URLs."""
    env = child_env(STREAM_STATUS_POLL_S="0.2", STREAM_KEEPALIVE_S="1", LOG_LEVEL="WARNING")
    ports = (free_port(), free_port())
    procs = [start_web(port, env) for port in ports]
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    try:
        for url, proc in zip(urls, procs, strict=True):
            wait_http(f"{url}/healthz", proc, timeout_s=60, what=f"uvicorn (logs: {LOGS})")
        yield urls[0], urls[1]
    finally:
        stop_all(procs)


@pytest.fixture
def owner() -> User:
    return cast(User, UserFactory.create())


@pytest.fixture
def auth(owner: User) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.create(user=owner).key}"}
