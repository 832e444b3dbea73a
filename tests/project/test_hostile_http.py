"""Hostile input over real HTTP (uvicorn, Django's ASGI handler, the stream route of ``/v1/chat/completions``):
each case was a 500 or an HTML page, and is a JSON 4xx now, in OpenAI's shape on ``/v1``, that writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings

from chats.models import Chat, Message
from core.http.json_body import max_body_bytes
from runs.models import Run
from tests.factories import ChatFactory, RunFactory
from tests.project.conftest import LiveUser

pytestmark = pytest.mark.django_db(transaction=True)

COMPLETIONS = "/v1/chat/completions"
FIVE_MB = 5 * 1024 * 1024


def _rows() -> tuple[int, int, int]:
    return Chat.objects.count(), Message.objects.count(), Run.objects.count()


def _openai_error(resp: httpx.Response, status: int, code: str, param: str | None = None) -> str:
    """The error's message, after checking OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    assert resp.status_code == status, resp.text[:500]
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    message: str = error["message"]
    return message


def _completion(*messages: dict[str, Any]) -> bytes:
    body = {"model": settings.ENGINE.served_model_name, "messages": list(messages)}
    return json.dumps(body).encode()  # ensure_ascii: NUL and lone surrogates travel as \u escapes


def _chunked(body: bytes, size: int = 7) -> Iterator[bytes]:
    """``body`` in pieces: httpx sends an iterator with ``Transfer-Encoding: chunked`` and no ``Content-Length``."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_5_mb_body_on_v1_is_a_json_413(live_web: str, live_user: LiveUser) -> None:
    """Was Django's HTML 400 page (RequestDataTooBig), declared length or chunked alike."""
    big = _completion({"role": "user", "content": "x" * FIVE_MB})
    headers = {**live_user.bearer, "Content-Type": "application/json"}
    with httpx.Client(base_url=live_web, timeout=30) as client:
        declared = client.post(COMPLETIONS, content=big, headers=headers)
        chunked = client.post(COMPLETIONS, content=_chunked(big, 65536), headers=headers)
    for resp in (declared, chunked):
        message = _openai_error(resp, 413, "request_too_large")
        assert message == f"The request body is larger than {max_body_bytes()} bytes; send a smaller one."
    assert _rows() == (0, 0, 0)


def test_a_5_mb_body_on_api_is_a_json_413(live_web: str, live_user: LiveUser) -> None:
    chat = ChatFactory.create(owner=live_user.user)
    body = json.dumps({"content": "x" * FIVE_MB}).encode()
    headers = {**live_user.headers, "Content-Type": "application/json"}
    resp = httpx.post(f"{live_web}/api/chats/{chat.pk}/messages", content=body, headers=headers, timeout=30)
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "request_too_large"
    assert _rows() == (1, 0, 0)


def test_deeply_nested_json_is_400_on_the_token_endpoint_and_on_v1(live_web: str, live_user: LiveUser) -> None:
    deep = b"[" * 10_000 + b"]" * 10_000
    json_headers = {"Content-Type": "application/json"}
    token = httpx.post(f"{live_web}/api/auth/token", content=deep, headers=json_headers)
    assert token.status_code == 400
    assert token.json()["error"]["code"] == "json_too_deep"

    v1 = httpx.post(f"{live_web}{COMPLETIONS}", content=deep, headers={**json_headers, **live_user.bearer})
    assert "64" in _openai_error(v1, 400, "json_too_deep")
    assert _rows() == (0, 0, 0)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (({"role": "user", "content": "hi"}, {"role": "user", "content": "a\udc00b"}), "messages[1].content"),
        (({"role": "user", "content": "\ud800"},), "messages[0].content"),
        (({"role": "user", "content": [{"type": "text", "text": "x\udfff"}]},), "messages[0].content[0].text"),
    ],
)
def test_text_postgres_cannot_store_on_v1_is_400_naming_the_message(
    live_web: str, live_user: LiveUser, messages: tuple[dict[str, Any], ...], param: str
) -> None:
    """A NUL was a DataError, a lone surrogate a UnicodeEncodeError: 500s when the call was stored."""
    headers = {**live_user.bearer, "Content-Type": "application/json"}
    resp = httpx.post(f"{live_web}{COMPLETIONS}", content=_completion(*messages), headers=headers)
    assert _openai_error(resp, 400, "invalid_text", param).startswith(f"'{param}' contains a ")
    assert _rows() == (0, 0, 0)


@pytest.mark.parametrize(
    ("header", "query"),
    [("99999999999999999999999", None), (None, "99999999999999999999999"), ("run-1:" + str(2**63), None)],
)
def test_an_out_of_range_last_event_id_is_400(
    live_web: str, live_user: LiveUser, header: str | None, query: str | None
) -> None:
    """Was a 500: Redis refused the id as "Invalid stream ID"."""
    run = RunFactory.create(chat=ChatFactory.create(owner=live_user.user))
    headers = {**live_user.headers, **({"Last-Event-ID": header} if header else {})}
    params = {"lastEventId": query} if query else None
    resp = httpx.get(f"{live_web}/api/runs/{run.pk}/stream", headers=headers, params=params, timeout=10)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "invalid_last_event_id"
    assert str(2**63 - 1) in resp.json()["error"]["message"]


def test_an_unknown_v1_path_is_a_json_404(live_web: str) -> None:
    resp = httpx.get(f"{live_web}/v1/no-such-endpoint")
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_chunked_bodies_on_api_are_read_like_declared_ones(live_web: str, live_user: LiveUser) -> None:
    """A chunked body was read as empty on ``/api`` (DRF takes no ``Content-Length`` for no body): a chat without its
    title, a prompt "content required", a sign-in refused."""
    headers = {**live_user.headers, "Content-Type": "application/json"}
    with httpx.Client(base_url=live_web, timeout=30) as client:
        created = client.post("/api/chats", content=_chunked(b'{"title": "Sent in pieces"}'), headers=headers)
        assert created.status_code == 201, created.text
        assert created.json()["title"] == "Sent in pieces"
        chat_id = created.json()["id"]
        prompt = client.post(
            f"/api/chats/{chat_id}/messages", content=_chunked(b'{"content": "Hello in pieces"}'), headers=headers
        )
        assert prompt.status_code == 202, prompt.text
        signin = client.post(
            "/api/auth/token",
            content=_chunked(json.dumps({"username": live_user.user.username, "password": "pw"}).encode()),
            headers={"Content-Type": "application/json"},
        )
        assert signin.status_code == 200, signin.text
        assert signin.json()["token"]
    assert Message.objects.get(chat_id=chat_id).content == "Hello in pieces"


def test_a_chunked_body_over_the_limit_on_api_is_a_json_413_that_writes_nothing(
    live_web: str, live_user: LiveUser
) -> None:
    chat = ChatFactory.create(owner=live_user.user)
    body = json.dumps({"content": "x" * FIVE_MB}).encode()
    headers = {**live_user.headers, "Content-Type": "application/json"}
    resp = httpx.post(
        f"{live_web}/api/chats/{chat.pk}/messages", content=_chunked(body, 65536), headers=headers, timeout=30
    )
    assert resp.status_code == 413, resp.text[:500]
    assert resp.json()["error"]["code"] == "request_too_large"
    assert _rows() == (1, 0, 0)
