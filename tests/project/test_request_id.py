"""Every response carries ``X-Request-ID`` and the request's log lines repeat it (``core.request_id``).

Checked through the test client (Django's sync handler) and through the ASGI application uvicorn serves,
whose run streams and ``/v1/chat/completions`` take their own route (``runs.streaming.asgi``) and send
their body after the middleware has returned.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from core.logs import RequestIdFilter, record_fields
from core.request_id import REQUEST_ID_PATTERN, current_request_id, request_id_for
from openai_api.urls import STREAM_PATHS as OPENAI_STREAM_PATHS
from runs.models import RunStatus
from runs.streaming import views as stream_views
from runs.streaming.asgi import RUN_STREAM_PATH, with_stream_route
from runs.streaming.contract import RunStreamWriter, StreamEvent
from tests.asgi_driver import asgi_call
from tests.factories import ChatFactory, RunFactory

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def request_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` with the request-id filter the console handler has (settings ``LOGGING``)."""
    caplog.set_level(logging.INFO)
    request_filter = RequestIdFilter()
    caplog.handler.addFilter(request_filter)
    yield caplog
    caplog.handler.removeFilter(request_filter)


@pytest.mark.parametrize(
    ("incoming", "kept"),
    [
        ("3f2b8c1e-9d4a-4e7b-8a6c-1b2c3d4e5f60", True),
        ("req.42:edge-7_a", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("two words", False),
        ("forged\nINFO line", False),
        ("<script>", False),
        ("caf\u00e9", False),
    ],
)
def test_an_incoming_id_is_kept_only_when_it_is_sane(incoming: str, kept: bool) -> None:
    chosen = request_id_for(incoming)
    assert (chosen == incoming) is kept
    assert REQUEST_ID_PATTERN.fullmatch(chosen)
    if not kept:
        assert GENERATED.fullmatch(chosen)


@pytest.mark.django_db
def test_every_response_carries_a_fresh_request_id(api: APIClient) -> None:
    first, second = api.get("/api/chats"), api.get("/api/chats")
    missing = api.get("/api/no-such-page")
    for resp in (first, second, missing):
        assert GENERATED.fullmatch(resp["X-Request-ID"]), resp.headers
    assert first["X-Request-ID"] != second["X-Request-ID"]
    assert current_request_id() == ""  # nothing leaks out of the request


@pytest.mark.django_db
def test_a_valid_incoming_id_is_echoed_and_an_invalid_one_replaced(api: APIClient) -> None:
    assert api.get("/healthz", HTTP_X_REQUEST_ID="edge-1234.abcd")["X-Request-ID"] == "edge-1234.abcd"
    replaced = api.get("/healthz", HTTP_X_REQUEST_ID="bad id; rm -rf")["X-Request-ID"]
    assert GENERATED.fullmatch(replaced)


@pytest.mark.django_db(transaction=True)  # /v1 reads the token on its own database threads
def test_the_openai_api_answers_with_the_request_id(user: User) -> None:
    token = Token.objects.create(user=user)
    resp = APIClient().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {token.key}", HTTP_X_REQUEST_ID="oa-1")
    assert resp.status_code == 200 and resp["X-Request-ID"] == "oa-1"


@pytest.mark.django_db(transaction=True)  # the run is admitted and queued when the request's transaction commits
def test_the_log_lines_of_a_request_repeat_its_id(
    api: APIClient, user: User, request_logs: pytest.LogCaptureFixture
) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello"}, format="json")
    assert resp.status_code == 202, resp.content

    events = [record_fields(r) for r in request_logs.records if r.name == "runs.events"]
    assert [e["event"] for e in events] == ["admitted", "queued"]
    assert {e["request_id"] for e in events} == {resp["X-Request-ID"]}
    request_logs.clear()
    logging.getLogger("tests").info("outside any request")
    assert "request_id" not in record_fields(request_logs.records[0])


# -- through the ASGI application (uvicorn's path) ------------------------------------------------------


def asgi_request(
    path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request through the project's ASGI routing (the stream route included), on a fresh loop/thread."""
    # As chatproject/asgi.py routes it; not get_asgi_application(): setup() would reconfigure logging.
    app = with_stream_route(ASGIHandler(), paths=(RUN_STREAM_PATH, *OPENAI_STREAM_PATHS))
    answer = asgi_call(app, path, method=method, headers=list((headers or {}).items()))
    return answer.status, answer.headers, answer.body


@pytest.mark.django_db(transaction=True)  # the stream view reads the run on its own database threads
def test_a_run_stream_over_asgi_carries_the_id_in_its_header_and_its_body_logs(
    user: User, request_logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunFactory.create(chat=ChatFactory.create(owner=user), status=RunStatus.DONE)
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.DELTA, {"text": "Paris.", "tokens": 2})
    writer.append(StreamEvent.DONE, {"status": "done", "finish_reason": "stop"})
    streamed = stream_views.iter_run_events

    async def logged_events(**kwargs: Any) -> AsyncIterator[bytes]:
        logging.getLogger("tests.stream").info("streaming the body")  # after the middleware has returned
        async for chunk in streamed(**kwargs):
            yield chunk

    monkeypatch.setattr(stream_views, "iter_run_events", logged_events)
    token = Token.objects.create(user=user)

    status, headers, body = asgi_request(
        f"/api/runs/{run.pk}/stream", headers={"Authorization": f"Token {token.key}", "X-Request-ID": "sse-77"}
    )

    assert status == 200 and b"Paris." in body
    assert headers["x-request-id"] == "sse-77"
    [line] = [r for r in request_logs.records if r.name == "tests.stream"]
    assert record_fields(line)["request_id"] == "sse-77"


@pytest.mark.django_db(transaction=True)
def test_openai_completions_over_asgi_carry_a_request_id(request_logs: pytest.LogCaptureFixture) -> None:
    status, headers, _ = asgi_request("/v1/chat/completions", method="POST")

    assert status == 401
    assert GENERATED.fullmatch(headers["x-request-id"])
    # Django logs a 4xx after the middleware chain has returned; under ASGI the request's id is still current.
    [warning] = [r for r in request_logs.records if r.name == "django.request"]
    assert record_fields(warning)["request_id"] == headers["x-request-id"]
