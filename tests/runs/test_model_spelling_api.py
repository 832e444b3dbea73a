"""``model`` on ``/api``: empty is the default model on a chat and on a prompt alike (the schema's "empty: the
default model"); a name with surrounding spaces is refused, as on ``/v1``."""

from __future__ import annotations

from django.conf import settings
from rest_framework.test import APIClient

from chats.models import Chat
from runs.models import Run


def test_an_empty_model_is_the_default_on_a_chat_and_on_a_prompt(api: APIClient) -> None:
    created = api.post("/api/chats", {"model": ""}, format="json")
    assert created.status_code == 201, created.json()
    chat_id = created.json()["id"]
    posted = api.post(f"/api/chats/{chat_id}/messages", {"content": "hi", "model": ""}, format="json")
    assert posted.status_code == 202, posted.json()
    run = Run.objects.get(pk=posted.json()["run"]["id"])
    assert run.model == settings.ENGINE.served_model_name
    assert Chat.objects.get(pk=chat_id).model == ""  # the chat keeps "the default"


def test_a_model_with_surrounding_spaces_is_refused_on_a_chat_and_on_a_prompt(api: APIClient) -> None:
    spaced = f" {settings.ENGINE.served_model_name} "
    assert api.post("/api/chats", {"model": spaced}, format="json").status_code == 400
    chat_id = api.post("/api/chats", {}, format="json").json()["id"]
    refused = api.post(f"/api/chats/{chat_id}/messages", {"content": "hi", "model": spaced}, format="json")
    assert refused.status_code == 400
    assert not Run.objects.filter(chat_id=chat_id).exists()
