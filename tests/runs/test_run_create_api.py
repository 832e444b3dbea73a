from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from chats.models import Message
from runs.models import Run, RunStatus
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_post_message_creates_user_message_and_queued_run(api: APIClient, user) -> None:
    chat = ChatFactory(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello"}, format="json")
    assert resp.status_code == 202, resp.content
    body = resp.json()
    run = Run.objects.get(pk=body["run"]["id"])
    assert run.status == RunStatus.QUEUED
    assert run.user_message.content == "hello"
    assert body["stream_url"] == f"/api/runs/{run.pk}/stream"


def test_second_prompt_while_run_active_is_409(api: APIClient, user) -> None:
    chat = ChatFactory(owner=user)
    assert api.post(f"/api/chats/{chat.pk}/messages", {"content": "one"}, format="json").status_code == 202
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "two"}, format="json")
    assert resp.status_code == 409
    assert "in progress" in resp.json()["error"]["message"]
    assert Message.objects.filter(chat=chat).count() == 1
