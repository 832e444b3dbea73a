"""Hostile input on ``/api``, in-process: each case was a 500 or a silently dropped field, and is a clear 4xx in
the API's error shape now, that writes nothing. (``/v1`` and the stream: ``test_hostile_http.py``, over HTTP.)"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message
from core.http.json_body import MAX_JSON_DEPTH, nesting_depth
from runs.models import Run
from tests.factories import ChatFactory, UserFactory

pytestmark = pytest.mark.django_db

DEEP = b"[" * 10_000 + b"]" * 10_000
"""10,000 levels: a RecursionError in the json module (a 500) before the depth limit."""


def _rows() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (User, Token, Chat, Message, Run))


def _error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"] == "application/json"
    error: dict[str, Any] = resp.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def test_deeply_nested_json_on_the_token_endpoint_is_400_before_authentication() -> None:
    resp = APIClient().post("/api/auth/token", DEEP, content_type="application/json")
    error = _error(resp, 400, "json_too_deep")
    assert error["message"] == (
        f"The JSON body nests arrays and objects 10000 levels deep; the limit is {MAX_JSON_DEPTH}. Send a flatter body."
    )


@pytest.mark.parametrize(
    ("method", "url"),
    [("post", "/api/chats"), ("patch", "/api/chats/{chat}"), ("post", "/api/chats/{chat}/messages")],
)
def test_deeply_nested_json_on_the_chat_endpoints_is_400_and_writes_nothing(
    api: APIClient, user: User, method: str, url: str
) -> None:
    chat = ChatFactory.create(owner=user, title="keep")
    before = _rows()
    body = b'{"title": ' + b"{" * 5000 + b"}" * 5000 + b"}"  # objects too, nested in a field
    for raw in (DEEP, body):
        resp = getattr(api, method)(url.format(chat=chat.pk), raw, content_type="application/json")
        _error(resp, 400, "json_too_deep")
    assert _rows() == before
    chat.refresh_from_db()
    assert chat.title == "keep"


def test_nesting_at_the_limit_is_parsed_and_one_more_level_is_not(api: APIClient) -> None:
    at_limit = '{"title": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    resp = api.post("/api/chats", at_limit, content_type="application/json")
    assert _error(resp, 400, "invalid")["fields"] == {"title": ["must be a string."]}
    over = '{"title": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}"
    _error(api.post("/api/chats", over, content_type="application/json"), 400, "json_too_deep")


def test_brackets_inside_strings_are_text_not_nesting(api: APIClient) -> None:
    title = '[{"\\\\' + "[" * 150 + "}"
    resp = api.post("/api/chats", json.dumps({"title": title[:200]}), content_type="application/json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["title"] == title[:200]


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("{}", 1),
        ('[1, {"a": [2]}]', 3),
        ('"[[[["', 0),
        ('["\\"[[", [[]]]', 3),  # an escaped quote does not end the string
        ('"unterminated [[[[', 0),
        ("]]]][", 0),  # malformed (json.loads refuses it at once): never a negative depth
    ],
)
def test_nesting_depth(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


def test_the_depth_scan_is_linear_on_the_worst_strings() -> None:
    """Unterminated strings full of escaped quotes: a backtracking scan would be quadratic (hours at 2.5 MB)."""
    started = time.monotonic()
    for text in ('"' + '\\"' * 1_250_000, '["' * 800_000, "[" * 2_500_000):
        nesting_depth(text)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/chats", {"title": "a\x00b"}, "title"),
        ("/api/chats", {"title": "\ud800"}, "title"),
        ("/api/chats/{chat}", {"title": "x\udfff"}, "title"),
        ("/api/chats/{chat}/messages", {"content": "\ud83d alone"}, "content"),
        ("/api/auth/token", {"username": "al\x00ice", "password": "pw"}, "username"),
        ("/api/auth/token", {"username": "alice", "password": "\ud800"}, "password"),
    ],
)
def test_text_postgres_cannot_store_is_400_naming_the_field(
    api: APIClient, user: User, url: str, body: dict[str, str], field: str
) -> None:
    """A NUL was a DataError, a lone surrogate a UnicodeEncodeError (500s) where the text reached a query."""
    chat = ChatFactory.create(owner=user, title="keep")
    before = _rows()
    raw = json.dumps(body)  # escapes both (\\u0000, \\ud800), as a client's JSON would
    method = api.patch if url == "/api/chats/{chat}" else api.post
    error = _error(method(url.format(chat=chat.pk), raw, content_type="application/json"), 400, "invalid")
    assert list(error["fields"]) == [field]
    assert error["message"].startswith(f"{field}: contains a ")
    assert _rows() == before
    chat.refresh_from_db()
    assert chat.title == "keep"


def test_unknown_fields_on_a_prompt_are_400_naming_them(api: APIClient, user: User) -> None:
    """``ignore_eos`` and ``logprobs`` were once accepted (202) and silently ignored; this endpoint does not take
    them (``/v1`` does)."""
    chat = ChatFactory.create(owner=user)
    body = {"content": "hi", "ignore_eos": True, "logprobs": True, "stop": ["\n"]}
    error = _error(api.post(f"/api/chats/{chat.pk}/messages", body, format="json"), 400, "invalid")
    accepted = (
        "is not a field of this request; it accepts content, model, max_tokens, temperature, top_p, stop, seed, "
        "response_format."
    )
    assert error["fields"] == {"ignore_eos": [accepted], "logprobs": [accepted]}
    assert error["message"].startswith(f"ignore_eos: {accepted}")
    assert not Message.objects.exists() and not Run.objects.exists()


def test_unknown_fields_on_the_token_endpoint_are_400() -> None:
    UserFactory.create(username="alice")
    body = {"username": "alice", "password": "pw", "otp": "123456"}
    error = _error(APIClient().post("/api/auth/token", body, format="json"), 400, "invalid")
    assert error["fields"] == {"otp": ["is not a field of this request; it accepts username, password."]}
    assert not Token.objects.exists()


def test_an_unknown_field_name_is_quoted_safely(api: APIClient) -> None:
    """The name goes back in the error: a lone surrogate in it must not break the JSON renderer (a 500)."""
    raw = '{"title": "t", "\\ud800\\u0000' + "k" * 500 + '": 1}'
    error = _error(api.post("/api/chats", raw, content_type="application/json"), 400, "invalid")
    (name,) = error["fields"]
    assert name.startswith("\\ud800\\x00kkk") and len(name) <= 80
    assert not Chat.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [b'{"max_tokens": ' + b"9" * 5000 + b', "content": "hi"}', b'{"content": "hi", "temperature": Infinity}'],
)
def test_numbers_json_does_not_have_are_400(api: APIClient, user: User, raw: bytes) -> None:
    chat = ChatFactory.create(owner=user)
    _error(api.post(f"/api/chats/{chat.pk}/messages", raw, content_type="application/json"), 400, "parse_error")
    assert not Message.objects.exists()


def test_a_request_django_refuses_before_the_view_is_json_on_the_api() -> None:
    """``handler400``: a ``SuspiciousOperation`` (here a host not in ALLOWED_HOSTS) is JSON under /api/."""
    resp = APIClient().get("/api/chats", HTTP_HOST="evil.example")
    _error(resp, 400, "bad_request")
    page = APIClient().get("/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400 and not page["Content-Type"].startswith("application/json")
