"""A chat's own system prompt and temperature (PATCH), applied to its later runs; the export download."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat
from inference_workers.prompting import build_prompt_messages
from runs.models import Run
from tests.chat_turns import turn
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


def test_settings_are_shown_validated_and_used_by_later_runs(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.patch(
        f"/api/chats/{chat.pk}", {"system_prompt": "Answer like a pirate.", "temperature": 0.2}, format="json"
    )
    assert resp.status_code == 200
    assert resp.json()["system_prompt"] == "Answer like a pirate." and resp.json()["temperature"] == 0.2

    body = turn(api, chat.pk, "Hello?", "Arr.")
    run = Run.objects.get(pk=body["run"]["id"])
    assert run.temperature == 0.2 and body["run"]["temperature"] == 0.2
    assert build_prompt_messages(run=run)[0] == {"role": "system", "content": "Answer like a pirate."}

    named = api.post(f"/api/chats/{chat.pk}/messages", {"content": "Again", "temperature": 1.5}, format="json")
    assert named.json()["run"]["temperature"] == 1.5  # a prompt's own temperature wins
    Run.objects.filter(pk=named.json()["run"]["id"]).delete()

    api.patch(f"/api/chats/{chat.pk}", {"system_prompt": "", "temperature": None}, format="json")
    chat.refresh_from_db()
    assert chat.system_prompt == "" and chat.temperature is None
    later = turn(api, chat.pk, "And now?", "Fine.")
    run = Run.objects.get(pk=later["run"]["id"])
    assert run.temperature == 0.7
    assert build_prompt_messages(run=run)[0]["content"].startswith(settings.CONTEXT.system_prompt.strip()[:20])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"system_prompt": "x" * 4001}, "system_prompt"),
        ({"system_prompt": 3}, "system_prompt"),
    ],
)
def test_bad_settings_are_400(api: APIClient, user: User, body: dict[str, object], field: str) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.patch(f"/api/chats/{chat.pk}", body, format="json")
    assert resp.status_code == 400 and field in resp.json()["error"]["fields"]
    chat.refresh_from_db()
    assert chat.system_prompt == "" and chat.temperature is None


def test_another_users_settings_and_export_are_404(api: APIClient, other_api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    assert other_api.patch(f"/api/chats/{chat.pk}", {"system_prompt": "mine"}, format="json").status_code == 404
    assert other_api.get(f"/api/chats/{chat.pk}/export").status_code == 404
    assert Chat.objects.get(pk=chat.pk).system_prompt == ""


def test_export_markdown_and_json(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="Trip to Zürich")
    turn(api, chat.pk, "Where is the lake?", "Right in the city.")

    md = api.get(f"/api/chats/{chat.pk}/export", {"format": "markdown"})
    assert md.status_code == 200 and md["Content-Type"].startswith("text/markdown")
    assert md["Content-Disposition"] == f'attachment; filename="chat-{chat.pk}-trip-to-z-rich.md"'
    text = md.content.decode()
    assert text.startswith("# Trip to Zürich") and "Where is the lake?" in text and "Right in the city." in text
    assert api.get(f"/api/chats/{chat.pk}/export")["Content-Disposition"].endswith('.md"')  # the default

    js = api.get(f"/api/chats/{chat.pk}/export", {"format": "json"})
    assert js.status_code == 200 and js["Content-Disposition"].startswith("attachment;")
    data = json.loads(js.content)
    assert data["chat"]["title"] == "Trip to Zürich"
    assert [(m["role"], m["content"]) for m in data["messages"]] == [
        ("user", "Where is the lake?"),
        ("assistant", "Right in the city."),
    ]
    assert api.get(f"/api/chats/{chat.pk}/export", {"format": "pdf"}).status_code == 400
