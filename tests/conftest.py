from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import User
from core.redis_client import get_redis
from tests.factories import UserFactory


@pytest.fixture(autouse=True)
def clean_redis() -> Iterator[redis.Redis]:
    """Each test starts with an empty Redis database (the test command points REDIS_URL at its own db)."""
    client = get_redis()
    assert settings.REDIS_URL.rsplit("/", 1)[-1] != "0", "tests must not run against Redis db 0 (the dev stack's)"
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(autouse=True)
def default_tiers(request: pytest.FixtureRequest) -> None:
    """Transactional tests flush every table, the migration-seeded tiers included: put them back."""
    if "django_db_setup" in request.fixturenames or request.node.get_closest_marker("django_db"):
        from accounts.models import Tier
        from accounts.tier_defaults import seed_default_tiers

        request.getfixturevalue("django_db_blocker")
        seed_default_tiers(Tier)


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
