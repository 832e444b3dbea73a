from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import User
from core.redis_client import get_redis
from tests.factories import UserFactory

LIVE_FIXTURES = frozenset({"live_stack", "live_web"})
"""Fixtures that start the stack's own processes: a test that uses one is ``live`` wherever it sits."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``live`` every test that uses a live stack or drives the browser (which needs one), so
    ``make test-fast`` (``-m "not engine and not live"``) leaves it out without each module saying so."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & LIVE_FIXTURES or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.live)


@pytest.fixture(autouse=True)
def clean_redis() -> Iterator[redis.Redis]:
    """Each test starts with an empty Redis database (the test command points REDIS_URL at its own db)."""
    client = get_redis()
    # The db the client really uses: a URL whose path is not a number (".../DB1") silently means db 0.
    assert int(client.connection_pool.connection_kwargs.get("db", 0)) != 0, (
        f"tests must not run against Redis db 0 (the dev stack's); REDIS_URL names db "
        f"{settings.REDIS_URL.rsplit('/', 1)[-1]!r}: give a number from 1 to 15"
    )
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="session", autouse=True)
def default_deployment_ready(django_db_setup: None, django_db_blocker: Any) -> None:
    """The test database's default deployment is ``ready``, committed, as ``prepare_model`` leaves it on a real
    system (the test command runs it against the development database, not this one): a worker process a test
    starts finds it servable."""
    from tests.deployment_helpers import ensure_default_deployment

    if not str(settings.DATABASES["default"]["NAME"]).startswith("test_"):
        return  # no collected test uses the database: pytest-django set none up
    with django_db_blocker.unblock():
        ensure_default_deployment(mark_worker=False)


@pytest.fixture(autouse=True)
def default_tiers(request: pytest.FixtureRequest, clean_redis: redis.Redis) -> None:
    """Transactional tests flush every table, the migration-seeded tiers and deployment included: put them back.

    The default deployment is left ``ready`` (what ``prepare_model``, run before the suite, makes of it), and one
    worker of it is listed ready in Redis (``deployment:{key}:ready``, the marker a worker's heartbeat writes), so
    a prompt is accepted as on a running system; a test of the 503 without a worker removes it
    (:func:`tests.deployment_helpers.no_ready_worker`)."""
    from deployments.selection import forget_cached

    forget_cached()
    db_fixtures = ("db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback")
    if request.node.get_closest_marker("django_db") or any(f in request.fixturenames for f in db_fixtures):
        from accounts.models import Tier
        from accounts.tier_defaults import seed_default_tiers
        from tests.deployment_helpers import ensure_default_deployment

        request.getfixturevalue("django_db_blocker")
        seed_default_tiers(Tier)
        ensure_default_deployment()


@pytest.fixture
def user(db: None) -> User:
    return UserFactory.create()


@pytest.fixture
def other_user(db: None) -> User:
    return UserFactory.create()


@pytest.fixture
def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def other_api(other_user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(other_user)
    return client


@pytest.fixture(autouse=True)
def fresh_token_cache() -> Iterator[None]:
    """The API token cache (accounts/authentication.py) is per process: no test sees another's tokens."""
    from accounts.authentication import token_cache_clear

    token_cache_clear()
    yield
    token_cache_clear()


@pytest.fixture
def redis_round_trips(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Call it to start counting: what the calling thread sends to Redis from then on, one entry per round trip (a
    command's name, or a pipeline's names joined by spaces)."""

    def start() -> list[str]:
        sent: list[str] = []
        me = threading.current_thread()
        command, execute = redis.Redis.execute_command, redis.client.Pipeline.execute

        def counted_command(self: redis.Redis, *args: Any, **options: Any) -> Any:
            if threading.current_thread() is me:
                sent.append(str(args[0]))
            return command(self, *args, **options)

        def counted_execute(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is me and self.command_stack:
                sent.append(" ".join(str(args[0]) for args, _ in self.command_stack))
            return execute(self, *args, **kwargs)

        monkeypatch.setattr(redis.Redis, "execute_command", counted_command)
        monkeypatch.setattr(redis.client.Pipeline, "execute", counted_execute)
        return sent

    return start
