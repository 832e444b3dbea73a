"""``model`` on ``/api``: empty is the default model on a chat and on a prompt alike (the schema's "empty: the
default model"); a name with surrounding spaces is stripped here (``/v1`` refuses it, as vLLM and OpenAI do)."""

from __future__ import annotations

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from chats.models import Chat
from runs.models import Run

pytestmark = pytest.mark.django_db


def test_an_empty_model_is_the_default_on_a_chat_and_on_a_prompt(api: APIClient) -> None:
    created = api.post("/api/chats", {"model": ""}, format="json")
    assert created.status_code == 201, created.json()
    chat_id = created.json()["id"]
    posted = api.post(f"/api/chats/{chat_id}/messages", {"content": "hi", "model": ""}, format="json")
    assert posted.status_code == 202, posted.json()
    run = Run.objects.get(pk=posted.json()["run"]["id"])
    assert run.model == settings.ENGINE.served_model_name
    assert Chat.objects.get(pk=chat_id).model == ""  # the chat keeps "the default"


def test_a_model_with_surrounding_spaces_is_stripped_on_a_chat_and_on_a_prompt(api: APIClient) -> None:
    # /api strips (tests/deployments/test_models_api.py pins it for a chat); /v1 refuses, as vLLM and OpenAI do.
    spaced = f" {settings.ENGINE.served_model_name} "
    created = api.post("/api/chats", {"model": spaced}, format="json")
    assert created.status_code == 201 and created.json()["model"] == settings.ENGINE.served_model_name
    posted = api.post(f"/api/chats/{created.json()['id']}/messages", {"content": "hi", "model": spaced}, format="json")
    assert posted.status_code == 202, posted.json()
    assert Run.objects.get(pk=posted.json()["run"]["id"]).model == settings.ENGINE.served_model_name
