"""Login throttling on every door: the token API, the browser's /login/ and the admin's /admin/login/.

After ``AXES_FAILURE_LIMIT`` failures an account (from any address) and an address (on any account) are refused
with 429 and ``Retry-After`` until the cool-off has passed; a success clears the account's failures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest
from django.test import Client
from rest_framework.test import APIClient

from accounts.login_throttle import client_ip
from accounts.models import User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "s3cret-pass"
HERE, ELSEWHERE, THIRD = "198.51.100.7", "203.0.113.9", "192.0.2.44"


@dataclass(frozen=True)
class Door:
    name: str
    path: str
    failed: int  # the status of a wrong password (before any lockout)
    succeeded: int

    def attempt(self, username: str, password: str, address: str, **extra: Any) -> Any:
        body = {"username": username, "password": password}
        if self.path.startswith("/api/"):
            return APIClient().post(self.path, body, format="json", REMOTE_ADDR=address, **extra)
        return Client().post(self.path, {**body, "next": "/"}, REMOTE_ADDR=address, **extra)


DOORS = [
    Door("token-api", "/api/auth/token", failed=400, succeeded=200),
    Door("login-page", "/login/", failed=200, succeeded=302),
    Door("admin-login", "/admin/login/", failed=200, succeeded=302),
]


@pytest.fixture(params=DOORS, ids=[door.name for door in DOORS])
def door(request: pytest.FixtureRequest) -> Door:
    return request.param  # type: ignore[no-any-return]


def _user(username: str) -> User:
    user = UserFactory.create(username=username, is_staff=True)  # staff: the admin door lets them in
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def alice() -> User:
    return _user("alice")


@pytest.fixture
def bob() -> User:
    return _user("bob")


def _cool_off_s() -> float:
    return float(settings.AXES_COOLOFF_TIME.total_seconds())


def _assert_locked(resp: Any, door: Door, *, at_most_s: float) -> int:
    assert resp.status_code == 429, (resp.status_code, resp.content[:300])
    retry_after = int(resp["Retry-After"])
    assert 1 <= retry_after <= at_most_s
    if door.path.startswith("/api/"):
        error = resp.json()["error"]
        assert error["code"] == "login_locked"
        assert "Try again in" in error["message"]
    else:
        assert b"Too many failed sign-ins" in resp.content
    return retry_after


def _recorded_failures() -> int:
    return int(AccessAttempt.objects.aggregate(n=Sum("failures_since_start"))["n"] or 0)


def test_failures_lock_the_account_and_the_address_with_429_and_retry_after(door: Door, alice: User, bob: User) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert door.attempt("alice", "wrong", HERE).status_code == door.failed
    # The failure that reaches the limit is refused already.
    retry_after = _assert_locked(door.attempt("alice", "wrong", HERE), door, at_most_s=_cool_off_s())
    assert retry_after >= _cool_off_s() - 10

    # Locked: the right password too, for the account from anywhere and for any account from this address.
    _assert_locked(door.attempt("alice", PASSWORD, HERE), door, at_most_s=retry_after)
    _assert_locked(door.attempt("alice", PASSWORD, ELSEWHERE), door, at_most_s=retry_after)
    _assert_locked(door.attempt("bob", PASSWORD, HERE), door, at_most_s=retry_after)
    # Refused attempts are not counted: the lockout ends when it said it would.
    assert _recorded_failures() == limit

    # Another account from another address is unaffected.
    assert door.attempt("bob", PASSWORD, ELSEWHERE).status_code == door.succeeded


def test_a_success_resets_the_accounts_count(door: Door, alice: User) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert door.attempt("alice", "wrong", HERE).status_code == door.failed
    assert door.attempt("alice", PASSWORD, HERE).status_code == door.succeeded
    assert _recorded_failures() == 0
    for _ in range(limit - 1):
        assert door.attempt("alice", "wrong", HERE).status_code == door.failed
    assert door.attempt("alice", PASSWORD, HERE).status_code == door.succeeded


def test_signing_in_to_another_account_does_not_reset_the_addresss_count(alice: User, bob: User) -> None:
    door = DOORS[0]
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert door.attempt("alice", "wrong", HERE).status_code == door.failed
    assert door.attempt("bob", PASSWORD, HERE).status_code == door.succeeded  # the guesser's own account
    _assert_locked(door.attempt("carol", "wrong", HERE), door, at_most_s=_cool_off_s())


def test_the_lockout_ends_after_the_cool_off(door: Door, alice: User, settings: Any) -> None:
    settings.AXES_COOLOFF_TIME = timedelta(seconds=2)
    settings.AXES_FAILURE_LIMIT = 2
    assert door.attempt("alice", "wrong", HERE).status_code == door.failed
    retry_after = _assert_locked(door.attempt("alice", "wrong", HERE), door, at_most_s=2)
    _assert_locked(door.attempt("alice", PASSWORD, HERE), door, at_most_s=2)

    time.sleep(retry_after + 0.2)

    assert door.attempt("alice", PASSWORD, HERE).status_code == door.succeeded


def test_a_lockout_expires_by_the_clock_not_by_a_restart(alice: User) -> None:
    """Time travel: the failures are moved a whole cool-off into the past, as if the time had passed."""
    door = DOORS[0]
    for _ in range(settings.AXES_FAILURE_LIMIT):
        door.attempt("alice", "wrong", HERE)
    _assert_locked(door.attempt("alice", PASSWORD, HERE), door, at_most_s=_cool_off_s())
    for attempt in AccessAttempt.objects.all():
        attempt.attempt_time -= settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
        attempt.save()
    assert door.attempt("alice", PASSWORD, HERE).status_code == door.succeeded


def test_behind_a_proxy_the_address_is_the_one_the_proxy_saw(alice: User, settings: Any) -> None:
    settings.AUTH_PROXY_COUNT = 1
    door = DOORS[0]
    proxy = "10.0.0.1"
    for i in range(settings.AXES_FAILURE_LIMIT):
        # Different accounts, a forged left-most entry: still one client address, the one the proxy appended.
        door.attempt(f"nobody{i}", "wrong", proxy, HTTP_X_FORWARDED_FOR=f"1.2.3.{i}, {HERE}")
    _assert_locked(door.attempt("alice", PASSWORD, proxy, HTTP_X_FORWARDED_FOR=HERE), door, at_most_s=_cool_off_s())
    # Another client through the same proxy is unaffected.
    assert door.attempt("alice", PASSWORD, proxy, HTTP_X_FORWARDED_FOR=THIRD).status_code == door.succeeded


def test_client_ip_trusts_only_the_configured_proxies(settings: Any) -> None:
    request = HttpRequest()
    request.META = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 1.1.1.1, 10.0.0.2"}
    settings.AUTH_PROXY_COUNT = 0
    assert client_ip(request) == "10.0.0.1"
    settings.AUTH_PROXY_COUNT = 1
    assert client_ip(request) == "10.0.0.2"
    settings.AUTH_PROXY_COUNT = 2
    assert client_ip(request) == "1.1.1.1"
    request.META["HTTP_X_FORWARDED_FOR"] = ""  # a request that did not come through the proxies
    assert client_ip(request) == "10.0.0.1"
