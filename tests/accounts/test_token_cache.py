"""The API token cache (``accounts.authentication``): a revocation or a limit change is honoured within
``API_TOKEN_CACHE_S`` seconds, an unknown token is never cached, and 0 turns the cache off."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts import authentication
from accounts.models import User, UserLimitOverride

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Clock:
    settings.API_TOKEN_CACHE_S = 5.0
    fake = Clock()
    monkeypatch.setattr(authentication.time, "monotonic", fake)
    return fake


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_deleted_token_is_refused_once_its_cache_entry_expires(user: User, clock: Clock) -> None:
    token = Token.objects.create(user=user)
    client = client_for(token.key)
    assert client.get("/api/me").status_code == 200
    token.delete()

    clock.now += 4.9
    assert client.get("/api/me").status_code == 200  # within the bound: still the cached user
    clock.now += 0.2
    assert client.get("/api/me").status_code == 401


def test_a_deactivated_user_is_refused_after_the_ttl(user: User, clock: Clock) -> None:
    client = client_for(Token.objects.create(user=user).key)
    assert client.get("/api/me").status_code == 200
    User.objects.filter(pk=user.pk).update(is_active=False)
    clock.now += 5.1
    assert client.get("/api/me").status_code == 401


def test_a_limit_override_applies_after_the_ttl(user: User, clock: Clock) -> None:
    client = client_for(Token.objects.create(user=user).key)
    before = client.get("/api/me").json()["limits"]
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=before["max_concurrent_runs"] + 7)
    assert client.get("/api/me").json()["limits"] == before
    clock.now += 5.1
    assert client.get("/api/me").json()["limits"]["max_concurrent_runs"] == before["max_concurrent_runs"] + 7


def test_an_unknown_token_is_read_every_time(user: User, clock: Clock) -> None:
    client = client_for("0" * 40)
    assert client.get("/api/me").status_code == 401
    Token.objects.create(user=user, key="0" * 40)
    assert client.get("/api/me").status_code == 200


def test_zero_turns_the_cache_off(user: User, settings: Any) -> None:
    settings.API_TOKEN_CACHE_S = 0
    token = Token.objects.create(user=user)
    client = client_for(token.key)
    assert client.get("/api/me").status_code == 200
    token.delete()
    assert client.get("/api/me").status_code == 401


def bearer_models(key: str) -> int:
    """``GET /v1/models`` with ``Authorization: Bearer`` (the async endpoints' own authentication)."""
    return Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {key}").status_code


@pytest.mark.django_db(transaction=True)  # (the async view reads on the database threads)
def test_the_v1_bearer_token_is_cached_within_the_same_bound(user: User, clock: Clock) -> None:
    key = Token.objects.create(user=user).key
    assert bearer_models(key) == 200
    assert authentication.cached_token_user(key) == user
    Token.objects.filter(key=key).delete()
    clock.now += 4.9
    assert bearer_models(key) == 200  # within the bound: the cached user, read on the event loop
    clock.now += 0.2
    assert authentication.cached_token_user(key) is None
    assert bearer_models(key) == 401


@pytest.mark.django_db(transaction=True)
def test_one_cache_serves_token_and_bearer_requests_but_never_an_unknown_or_inactive_token(
    user: User, clock: Clock
) -> None:
    token = Token.objects.create(user=user)
    assert client_for(token.key).get("/api/me").status_code == 200  # DRF's authentication caches it
    Token.objects.filter(pk=token.pk).delete()
    assert bearer_models(token.key) == 200  # and /v1 finds it there

    assert bearer_models("1" * 40) == 401
    assert authentication.cached_token_user("1" * 40) is None
    inactive = User.objects.create(username="inactive", is_active=False, tier=user.tier)
    key = Token.objects.create(user=inactive).key
    assert bearer_models(key) == 401 and authentication.cached_token_user(key) is None
    Token.objects.create(user=user, key="1" * 40)
    assert bearer_models("1" * 40) == 200  # an unknown token was not remembered as unknown
