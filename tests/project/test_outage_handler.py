"""An outage that a middleware meets after the view (a session saved in ``process_response``) is the same 503 as one
a view meets: ``handler500`` (``core.errors.server_error``) finds the exception, on the WSGI path and on the ASGI
one (asgiref runs it inside the ``except`` that caught it), and answers as ``BackendOutageMiddleware`` does."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import OperationalError
from django.test import AsyncClient, Client

from core.request_id import current_request_id

pytestmark = pytest.mark.django_db

OUTAGES = [
    (OperationalError("connection refused"), "database_unavailable"),
    (redis.ConnectionError(), "redis_unavailable"),
]


def failing_after_the_view(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def process_response(self: SessionMiddleware, request: Any, response: Any) -> Any:
        raise error

    monkeypatch.setattr(SessionMiddleware, "process_response", process_response)


@pytest.mark.parametrize(("error", "code"), OUTAGES)
def test_wsgi_path(monkeypatch: pytest.MonkeyPatch, error: Exception, code: str) -> None:
    failing_after_the_view(monkeypatch, error)
    answer = Client(raise_request_exception=False).get("/api/me")
    assert answer.status_code == 503 and answer["Retry-After"] == str(settings.OUTAGES.retry_after_s)
    assert answer.json()["error"]["code"] == code


@pytest.mark.parametrize(("error", "code"), OUTAGES)
def test_asgi_path(monkeypatch: pytest.MonkeyPatch, error: Exception, code: str) -> None:
    failing_after_the_view(monkeypatch, error)
    client_get = async_to_sync(AsyncClient(raise_request_exception=False).get)

    def get(path: str) -> Any:
        # In a context of its own: async_to_sync copies the coroutine's context changes back to this thread, and the
        # request-id middleware's async path leaves its id set (under uvicorn each request is a task of its own).
        return contextvars.copy_context().run(client_get, path)

    answer = get("/v1/models")
    assert answer.status_code == 503 and answer["Retry-After"] == str(settings.OUTAGES.retry_after_s)
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["type"] == "server_error"  # OpenAI's shape under /v1
    page = get("/healthz")
    assert page.status_code == 503 and "not answering" in page.content.decode()
    assert current_request_id() == ""  # the ASGI requests' ids stayed in their own context
