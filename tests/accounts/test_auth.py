"""Token auth for programs (POST /api/auth/token) and session auth with CSRF for the browser."""

from __future__ import annotations

import pytest
from django.http import HttpRequest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> User:
    user = UserFactory.create(username="alice")
    user.set_password("s3cret-pass")
    user.save()
    return user


def test_token_for_good_credentials_authenticates_api_calls(alice: User) -> None:
    client = APIClient()
    resp = client.post("/api/auth/token", {"username": "alice", "password": "s3cret-pass"}, format="json")
    assert resp.status_code == 200, resp.content
    token = resp.json()["token"]
    assert Token.objects.get(key=token).user == alice

    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    created = client.post("/api/chats", {"title": "from a script"}, format="json")
    assert created.status_code == 201  # token auth needs no CSRF token
    assert Chat.objects.get(pk=created.json()["id"]).owner == alice
    assert [c["id"] for c in client.get("/api/chats").json()["results"]] == [created.json()["id"]]


def test_asking_twice_returns_the_same_token(alice: User) -> None:
    body = {"username": "alice", "password": "s3cret-pass"}
    first = APIClient().post("/api/auth/token", body, format="json").json()["token"]
    second = APIClient().post("/api/auth/token", body, format="json").json()["token"]
    assert first == second


@pytest.mark.parametrize(
    "body",
    [
        {"username": "alice", "password": "wrong"},
        {"username": "nobody", "password": "s3cret-pass"},
        {"username": "alice", "password": "s3cret-pass "},
    ],
)
def test_bad_credentials_are_400_without_a_token(alice: User, body: dict[str, str]) -> None:
    resp = APIClient().post("/api/auth/token", body, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_credentials"
    assert not Token.objects.exists()


def test_inactive_user_gets_no_token(alice: User) -> None:
    alice.is_active = False
    alice.save()
    resp = APIClient().post("/api/auth/token", {"username": "alice", "password": "s3cret-pass"}, format="json")
    assert resp.status_code == 400
    assert not Token.objects.exists()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [({}, "username: This field is required"), ({"username": 1, "password": "x"}, "username: must be a string")],
)
def test_malformed_token_request_is_400(body: dict[str, object], fragment: str) -> None:
    resp = APIClient().post("/api/auth/token", body, format="json")
    assert resp.status_code == 400
    assert fragment in resp.json()["error"]["message"]


def test_unknown_or_malformed_token_is_401() -> None:
    for header in ("Token nope", "Token", "Token a b"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get("/api/chats").status_code == 401


def test_session_auth_enforces_csrf_on_unsafe_methods(alice: User) -> None:
    client = APIClient(enforce_csrf_checks=True)
    # The login throttle (django-axes) checks every authentication against its request.
    assert client.login(request=HttpRequest(), username="alice", password="s3cret-pass")

    assert client.get("/api/chats").status_code == 200  # safe methods need no CSRF token

    refused = client.post("/api/chats", {"title": "no csrf"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]["message"]
    assert not Chat.objects.exists()

    # The browser gets the token from the csrftoken cookie (set by any page that uses it).
    client.get("/admin/login/")
    csrf = client.cookies["csrftoken"].value
    accepted = client.post("/api/chats", {"title": "with csrf"}, format="json", HTTP_X_CSRFTOKEN=csrf)
    assert accepted.status_code == 201
    assert Chat.objects.get().owner == alice
