"""``GET /api/runs/{id}``: what a run's JSON says of how it went on after its worker drained or died."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from runs.models import Recovery, RunStatus
from tests.factories import ChatFactory, RunFactory

pytestmark = pytest.mark.django_db


def test_a_continued_run_shows_how_many_streamed_tokens_it_went_on_from(api: APIClient, user: User) -> None:
    run = RunFactory.create(
        chat=ChatFactory.create(owner=user), status=RunStatus.DONE, recovery=Recovery.CONTINUED, resumed_tokens=17
    )
    body = api.get(f"/api/runs/{run.pk}").json()
    assert (body["recovery"], body["resumed_tokens"]) == ("continued", 17)
    fresh = RunFactory.create(chat=ChatFactory.create(owner=user), status=RunStatus.DONE)
    assert api.get(f"/api/runs/{fresh.pk}").json()["resumed_tokens"] == 0
