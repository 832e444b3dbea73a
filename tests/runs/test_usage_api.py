"""``GET /api/usage``: limits, bucket, days, and the last 429s recorded when they happen."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import User, UserLimitOverride
from runs.usage import REJECTIONS_KEPT
from tests.chat_turns import turn
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


def test_usage_shows_limits_bucket_days_and_refusals(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Hello?", "Hi.")
    body = api.get("/api/usage").json()
    assert body["tier"]["tier"] == "free" and body["tier"]["max_concurrent_runs"] >= 1
    tokens = body["buckets"][0]
    assert tokens["name"] == "tokens" and 0 < tokens["available"] < tokens["capacity"]  # the run was charged
    assert tokens["refill_per_second"] > 0 and tokens["full_at"]
    (today,) = body["daily"]
    assert today["runs"] == 1 and today["output_tokens"] == 5
    assert body["rejections"] == []

    UserLimitOverride.objects.create(user=user, max_concurrent_runs=0)
    for _ in range(REJECTIONS_KEPT + 3):
        assert api.post(f"/api/chats/{chat.pk}/messages", {"content": "more"}, format="json").status_code == 429
    rejections = api.get("/api/usage").json()["rejections"]
    assert len(rejections) == REJECTIONS_KEPT
    assert rejections[0]["status"] == 429 and rejections[0]["code"] == "limit_concurrency"
    assert "Too many runs at once" in rejections[0]["reason"] and rejections[0]["at"]


def test_usage_is_ones_own(api: APIClient, other_api: APIClient, user: User) -> None:
    turn(api, ChatFactory.create(owner=user).pk, "Hello?", "Hi.")
    assert other_api.get("/api/usage").json()["daily"] == []
