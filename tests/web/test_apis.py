"""The small APIs the browser UI relies on: /api/me and the chat's active_run, plus the page views."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from runs.models import RunStatus
from tests.factories import ChatFactory, RunFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_me_returns_username_tier_and_limits(api: APIClient, user) -> None:
    resp = api.get("/api/me")
    assert resp.status_code == 200
    body = resp.json()
    assert body["username"] == user.username
    assert body["tier"] == user.tier.name
    assert body["limits"]["max_output_tokens"] == user.tier.max_output_tokens
    assert body["limits"]["bucket_capacity_tokens"] == user.tier.bucket_capacity_tokens
    # A user who has not posted yet has a full bucket.
    assert body["remaining_tokens"] == user.tier.bucket_capacity_tokens


def test_me_budget_shrinks_by_what_a_prompt_reserves(api: APIClient, user) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello", "max_tokens": 100}, format="json")
    assert resp.status_code == 202, resp.content
    remaining = api.get("/api/me").json()["remaining_tokens"]
    capacity = user.tier.bucket_capacity_tokens
    # The prompt reserved its input tokens plus max_tokens; the bucket refills a little meanwhile.
    assert capacity - 120 <= remaining <= capacity - 50


def test_me_needs_authentication() -> None:
    resp = APIClient().get("/api/me")
    assert resp.status_code in (401, 403)
    assert "error" in resp.json()


def test_chat_detail_names_the_unfinished_run(api: APIClient, user) -> None:
    chat = ChatFactory.create(owner=user)
    RunFactory.create(chat=chat, status=RunStatus.DONE)
    assert api.get(f"/api/chats/{chat.pk}").json()["active_run"] is None
    active = RunFactory.create(chat=chat, status=RunStatus.STREAMING)
    body = api.get(f"/api/chats/{chat.pk}").json()
    assert body["active_run"]["id"] == active.pk
    assert body["active_run"]["status"] == "streaming"
    assert body["active_run"]["stream_url"] == f"/api/runs/{active.pk}/stream"


def test_chat_page_requires_login_and_sets_csp(user) -> None:
    client = Client()
    resp = client.get("/")
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/")
    client.force_login(user)
    resp = client.get("/c/123")
    assert resp.status_code == 200
    assert "script-src 'self'" in resp["Content-Security-Policy"]
    assert b'type="module"' in resp.content
    assert "csrftoken" in resp.cookies
