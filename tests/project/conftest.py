"""A live web process for the tests that drive the whole HTTP path (uvicorn, Django's ASGI handler, the stream
route that serves ``/v1/chat/completions``): the hostile-input tests and the schemathesis run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from accounts.models import User
from bench.lib.processes import web_process
from tests.factories import UserFactory

LOGS = Path(__file__).resolve().parents[2] / "artifacts" / "test-project-logs"


@pytest.fixture(scope="module")
def live_web(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """One uvicorn process on the test database and Redis db; yields its base URL."""
    # Generated credentials are mostly wrong: a high sign-in limit keeps the throttle (tested on its own) from
    # answering 429 to the rest of the run.
    with web_process(log=LOGS / "web.log", LOG_LEVEL="WARNING", AUTH_LOCKOUT_FAILURES="100000") as url:
        yield url


@dataclass(frozen=True)
class LiveUser:
    user: User
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def live_user(transactional_db: None) -> LiveUser:
    """A user with an API token, committed (the web process reads it); the table flush after the test ends it."""
    user = UserFactory.create(username="schemathesis")
    return LiveUser(user=user, token=Token.objects.create(user=user).key)
