"""Chat CRUD, ownership (404 for another user's chat or run on every endpoint) and authentication."""

from __future__ import annotations

import json

import pytest
from pytest_django.fixtures import Settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db


def test_create_chat_belongs_to_the_authenticated_user(api: APIClient, user: User, other_user: User) -> None:
    # The user always comes from authentication: an owner in the body is an unknown field, refused.
    refused = api.post("/api/chats", {"title": "Trip plans", "owner": other_user.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"owner": ["is not a field of this request; it accepts title, model."]}
    assert not Chat.objects.exists()

    resp = api.post("/api/chats", {"title": "Trip plans"}, format="json")

    assert resp.status_code == 201, resp.content
    chat = Chat.objects.get(pk=resp.json()["id"])
    assert chat.owner == user
    assert resp.json()["title"] == "Trip plans"


def test_create_chat_without_title(api: APIClient, user: User) -> None:
    resp = api.post("/api/chats", {}, format="json")
    assert resp.status_code == 201
    assert resp.json()["title"] == ""


def test_get_patch_delete_own_chat(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="old")
    MessageFactory.create(chat=chat)

    assert api.get(f"/api/chats/{chat.pk}").json()["title"] == "old"

    resp = api.patch(f"/api/chats/{chat.pk}", {"title": "new"}, format="json")
    assert resp.status_code == 200 and resp.json()["title"] == "new"
    chat.refresh_from_db()
    assert chat.title == "new"

    assert api.delete(f"/api/chats/{chat.pk}").status_code == 204
    assert not Chat.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(chat_id=chat.pk).exists()
    assert api.get(f"/api/chats/{chat.pk}").status_code == 404


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"title": 5}, "must be a string"),
        ({"title": "x" * 201}, "title: is 201 characters long; the limit is 200"),
        ({"title": "x" * 200 + " "}, "title: is 201 characters long"),  # trimming would hide the excess
        ({"title": None}, "null"),
        ({"title": "a\x00b"}, "title: contains a NUL character"),
        ({"name": "x"}, "name: is not a field of this request; it accepts title, model, system_prompt, temperature."),
    ],
)
def test_patch_chat_validation(api: APIClient, user: User, body: dict[str, object], fragment: str) -> None:
    chat = ChatFactory.create(owner=user, title="keep")
    resp = api.patch(f"/api/chats/{chat.pk}", body, format="json")
    assert resp.status_code == 400
    assert fragment in resp.json()["error"]["message"]
    chat.refresh_from_db()
    assert chat.title == "keep"


def test_patch_is_partial_an_empty_body_changes_nothing(api: APIClient, user: User) -> None:
    """The schema's PATCH body has no required field (a partial update); the endpoint agrees."""
    chat = ChatFactory.create(owner=user, title="keep")
    resp = api.patch(f"/api/chats/{chat.pk}", {}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["title"] == "keep"
    chat.refresh_from_db()
    assert chat.title == "keep"


def _others_chat_with_queued_run(owner: User) -> tuple[Chat, Run]:
    chat = ChatFactory.create(owner=owner, title="private")
    run = RunFactory.create(chat=chat, status=RunStatus.QUEUED)
    return chat, run


ENDPOINTS = [
    ("get", "/api/chats/{chat}"),
    ("patch", "/api/chats/{chat}"),
    ("delete", "/api/chats/{chat}"),
    ("get", "/api/chats/{chat}/messages"),
    ("post", "/api/chats/{chat}/messages"),
    ("get", "/api/runs/{run}"),
    ("post", "/api/runs/{run}/cancel"),
]
STREAM = "/api/runs/{run}/stream"  # tested apart: an async view, whose ORM calls need committed rows
# A body each endpoint accepts: a prompt's body is checked before its chat (the ownership check is part of the
# statement that writes it, runs.prompt_insert), and a bad body is a 400 whoever's the chat is.
BODIES = {"patch": {"title": "mine now"}, "post": {"content": "hello"}}


@pytest.mark.parametrize(("method", "template"), ENDPOINTS)
def test_another_users_chat_or_run_is_404_and_untouched(
    api: APIClient, other_user: User, method: str, template: str
) -> None:
    chat, run = _others_chat_with_queued_run(other_user)
    url = template.format(chat=chat.pk, run=run.pk)
    body = BODIES.get(method) if template != "/api/runs/{run}/cancel" else None

    resp = getattr(api, method)(url, body, format="json") if body else getattr(api, method)(url)

    assert resp.status_code == 404, resp.content
    chat.refresh_from_db()
    run.refresh_from_db()
    assert chat.title == "private"
    assert run.status == RunStatus.QUEUED
    assert Message.objects.filter(chat=chat).count() == 1
    assert Run.objects.filter(chat=chat).count() == 1


@pytest.mark.parametrize(("method", "template"), ENDPOINTS)
def test_missing_ids_are_404_like_foreign_ones(api: APIClient, method: str, template: str) -> None:
    for missing in (987654321, 2**70):  # the second is beyond bigint and must not reach the database as such
        url = template.format(chat=missing, run=missing)
        resp = getattr(api, method)(url, BODIES.get(method, {}), format="json")
        assert resp.status_code == 404, (url, resp.content)


def test_a_bad_prompt_body_is_the_same_400_for_a_foreign_a_missing_and_an_own_chat(
    api: APIClient, user: User, other_user: User
) -> None:
    """Validation comes before the chat's check, and says nothing about the chat."""
    foreign, own = ChatFactory.create(owner=other_user), ChatFactory.create(owner=user)
    answers = [
        api.post(f"/api/chats/{chat_id}/messages", {"content": "hi", "title": "x"}, format="json")
        for chat_id in (foreign.pk, 987654321, own.pk)
    ]
    assert [r.status_code for r in answers] == [400, 400, 400]
    assert answers[0].json() == answers[1].json() == answers[2].json()
    assert not Message.objects.filter(chat__in=[foreign, own]).exists()


@pytest.mark.django_db(transaction=True)
def test_run_stream_of_another_users_run_is_404(user: User, other_user: User) -> None:
    """With real credentials (the SSE view authenticates itself): foreign and missing runs look the same."""
    _, run = _others_chat_with_queued_run(other_user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")

    foreign = client.get(STREAM.format(run=run.pk))
    missing = client.get(STREAM.format(run=987654321))
    beyond_bigint = client.get(STREAM.format(run=2**70))

    assert foreign.status_code == missing.status_code == beyond_bigint.status_code == 404
    assert foreign.json() == missing.json()
    assert APIClient().get(STREAM.format(run=run.pk)).status_code == 401
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


@pytest.mark.parametrize(
    ("method", "template"), [*ENDPOINTS, ("get", STREAM), ("get", "/api/chats"), ("post", "/api/chats")]
)
def test_anonymous_requests_are_refused(method: str, template: str, other_user: User) -> None:
    chat, run = _others_chat_with_queued_run(other_user)
    url = template.format(chat=chat.pk, run=run.pk)
    resp = getattr(APIClient(), method)(url, {"title": "t", "content": "c"}, format="json")
    assert resp.status_code in (401, 403)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert Chat.objects.filter(owner=other_user).count() == 1


def test_chat_list_shows_only_own_chats(api: APIClient, user: User, other_user: User) -> None:
    mine = ChatFactory.create(owner=user)
    ChatFactory.create(owner=other_user)
    assert [c["id"] for c in api.get("/api/chats").json()["results"]] == [mine.pk]


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"title": }', b"not json at all", b'{"title": "a"} trailing', b"\xff\xfe", b'{"title": NaN}'],
)
@pytest.mark.parametrize("url", ["/api/chats", "/api/chats/{chat}/messages", "/api/chats/{chat}"])
def test_malformed_json_is_400(api: APIClient, user: User, raw: bytes, url: str) -> None:
    chat = ChatFactory.create(owner=user)
    path = url.format(chat=chat.pk)
    method = api.patch if url == "/api/chats/{chat}" else api.post
    resp = method(path, raw, content_type="application/json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["code"] == "parse_error"
    assert Chat.objects.count() == 1
    assert not Message.objects.exists()


@pytest.mark.parametrize("raw", [b"[]", b'"text"', b"123", b"null"])
def test_json_that_is_not_an_object_is_400(api: APIClient, user: User, raw: bytes) -> None:
    chat = ChatFactory.create(owner=user)
    for path in ("/api/chats", f"/api/chats/{chat.pk}/messages"):
        resp = api.post(path, raw, content_type="application/json")
        assert resp.status_code == 400, resp.content
        assert resp.json()["error"]["message"]
    assert Chat.objects.count() == 1
    assert not Message.objects.exists()


def test_form_encoded_body_is_415(api: APIClient, user: User) -> None:
    resp = api.post("/api/chats", "title=x", content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 415
    assert not Chat.objects.exists()


def test_a_body_over_the_upload_limit_is_413_with_a_json_error(api: APIClient, user: User, settings: Settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    chat = ChatFactory.create(owner=user)
    body = json.dumps({"content": "x" * 2000})

    resp = api.post(f"/api/chats/{chat.pk}/messages", body, content_type="application/json")

    assert resp.status_code == 413
    assert resp.json()["error"] == {
        "code": "request_too_large",
        "message": "The request body is larger than 1000 bytes; send a smaller one.",
    }
    assert not Message.objects.exists()
