"""An outage of Redis or Postgres is a 503 with ``Retry-After`` on every endpoint, never a 500: a real uvicorn
web process, every URL pattern of the project (``bench.lib.url_sweep``) hit with a GET and a POST, while

- a ``redis-server`` of the test's own (on a free port; never the shared one) is paused (``CLIENT PAUSE``: every
  command waits, so only the socket timeout ends them) and then stopped;
- the web process's Postgres is a closed port (nothing listens: every connection is refused).

``/readyz`` must say "not ready" (503), ``/healthz`` stays 200, and the paths whose work needs the failed
service answer 503 with the error body of their API (OpenAI's shape under ``/v1``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from rest_framework.authtoken.models import Token

from bench.lib.processes import free_port, web_process
from bench.lib.url_sweep import body_for, fill, sweep_requests
from chats.models import MessageRole
from deployments.models import ModelDeployment
from generation.worker_contract import deployment_ready_key
from runs.models import RunStatus
from tests.deployment_helpers import TEST_WORKER
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

LOGS = Path(__file__).resolve().parents[2] / "artifacts" / "test-project-logs"
RETRY_AFTER = "7"
OUTAGE_ENV = {"REDIS_SOCKET_TIMEOUT_S": "1", "OUTAGE_RETRY_AFTER_S": RETRY_AFTER, "DB_POOL_TIMEOUT_S": "2"}
"""A 1 s Redis socket timeout and a 2 s pool timeout keep the sweep short; the Retry-After is the configured one."""
PAUSE_MS = 60_000
NEEDS_REDIS = {
    ("POST", "/api/chats/{chat_id}/messages"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
}
"""Requests whose work cannot be done without Redis (admission, the scheduler). Not the run stream: it opens
anyway and follows the run from Postgres until Redis answers again (runs/streaming/follow.py), so a restart of
Redis does not end it; the sweep only checks it is no 5xx."""


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH")
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*argv, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_timeout=2)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    try:
        yield port, proc
    finally:
        proc.kill()
        proc.wait(10)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def user_with_rows() -> dict[str, Any]:
    """A user's token, an idle chat (a prompt there reaches the admission) and a streaming run in another (its
    stream is in Redis: a finished run's stream can be answered from Postgres alone)."""
    user = UserFactory.with_tier("pro")
    idle = ChatFactory.create(owner=user)
    busy_chat = ChatFactory.create(owner=user)
    message = MessageFactory.create(chat=busy_chat, role=MessageRole.USER, content="Hi")
    run = RunFactory.create(chat=busy_chat, user=user, user_message=message, status=RunStatus.STREAMING)
    return {"token": Token.objects.create(user=user).key, "chat_id": idle.pk, "run_id": run.pk}


def sweep(base_url: str, rows: dict[str, Any]) -> dict[tuple[str, str], httpx.Response]:
    """Every request of :func:`sweep_requests`; a response that streams (SSE) is kept with its status and
    headers only (a live stream would not end)."""
    model = settings.ENGINE.served_model_name
    answers = {}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for method, template in sweep_requests():
            path = fill(template, chat_id=rows["chat_id"], run_id=rows["run_id"])
            scheme = "Bearer" if template.startswith("/v1/") else "Token"
            body = body_for(template, model=model) if method == "POST" else None
            headers = {"Authorization": f"{scheme} {rows['token']}"}
            with client.stream(method, path, json=body, headers=headers) as answer:
                if not answer.headers.get("content-type", "").startswith("text/event-stream"):
                    answer.read()
                answers[method, template] = answer
    return answers


def assert_outage_answers(answers: dict[tuple[str, str], httpx.Response], *, needs: set[tuple[str, str]]) -> None:
    wrong = {
        f"{m} {t}": r.status_code for (m, t), r in answers.items() if r.status_code >= 500 and r.status_code != 503
    }
    assert wrong == {}, f"5xx other than 503: {wrong}"
    for key in needs:
        answer = answers[key]
        assert answer.status_code == 503, (key, answer.status_code, answer.text)
        assert answer.headers.get("Retry-After") == RETRY_AFTER, (key, answer.text)
        error = answer.json()["error"]
        assert "not answering" in error["message"], key
        if key[1].startswith("/v1/"):
            assert error["type"] == "server_error" and "param" in error, key  # OpenAI's shape
    assert answers["GET", "/api/runs/{run_id}/stream"].status_code in (200, 503)
    ready = answers["GET", "/readyz"]
    assert ready.status_code == 503 and ready.json()["status"] == "not ready"
    assert answers["GET", "/healthz"].status_code == 200
    assert answers["GET", "/metrics"].status_code in (200, 503)


def test_redis_paused_then_stopped_is_503_everywhere(own_redis: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, server = own_redis
    rows = user_with_rows()
    url = f"redis://127.0.0.1:{port}"
    env = {**OUTAGE_ENV, "REDIS_URL": f"{url}/0", "CELERY_BROKER_URL": f"{url}/1", "LOG_LEVEL": "WARNING"}
    # The default model has a ready worker (its heartbeat's marker, in this Redis), so a prompt reaches admission;
    # without one the web process would answer "no ready worker" from its cached count, never asking Redis.
    default = ModelDeployment.objects.get(is_default=True)
    redis.Redis(port=port).zadd(deployment_ready_key(default.key), {TEST_WORKER: time.time() + 3600})
    with web_process(log=LOGS / "outage-redis-web.log", **env) as base_url:
        httpx.get(f"{base_url}/api/models", headers={"Authorization": f"Token {rows['token']}"}, timeout=60)
        # Every client's commands wait, the pausing one's too (so no UNPAUSE): a stalled server for PAUSE_MS.
        redis.Redis(port=port).execute_command("CLIENT", "PAUSE", str(PAUSE_MS))
        started = time.monotonic()
        paused = sweep(base_url, rows)
        took = time.monotonic() - started
        assert_outage_answers(paused, needs=NEEDS_REDIS | {("POST", "/api/chats/{chat_id}/messages")})
        assert paused["POST", "/api/chats/{chat_id}/messages"].json()["error"]["code"] == "redis_unavailable"
        assert took < PAUSE_MS / 1000  # every request failed within the socket timeout, none outwaited the pause

        server.kill()  # Redis gone: refused connections
        server.wait(10)
        assert_outage_answers(sweep(base_url, rows), needs=NEEDS_REDIS)


def test_postgres_unreachable_is_503_everywhere() -> None:
    rows = user_with_rows()
    env = {**OUTAGE_ENV, "DATABASE_URL": f"postgres://chat:chat@127.0.0.1:{closed_port()}/nowhere"}
    with web_process(log=LOGS / "outage-postgres-web.log", LOG_LEVEL="WARNING", **env) as base_url:
        answers = sweep(base_url, rows)
    needs = {("GET", "/api/chats"), ("POST", "/api/chats"), ("GET", "/api/chats/{chat_id}")}
    needs |= {("GET", "/api/chats/{chat_id}/messages"), ("POST", "/api/chats/{chat_id}/messages")}
    needs |= {
        ("GET", "/api/runs/{run_id}"),
        ("POST", "/api/runs/{run_id}/cancel"),
        ("GET", "/api/runs/{run_id}/stream"),
    }
    needs |= {("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions")}
    assert_outage_answers(answers, needs=needs)
    assert answers["GET", "/api/chats"].json()["error"]["code"] == "database_unavailable"
