"""``/api/memory`` and ``/api/memories`` without the embedding worker: listing, search, paging, deletion, the switch,
clear errors, and another user's memory as a 404."""

from __future__ import annotations

import numpy as np
import pytest
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat
from core.vector_index import pack
from deployments.models import DeploymentKind, ModelDeployment
from deployments.selection import forget_cached
from memory.index import process_index
from memory.models import Memory
from tests.factories import ChatFactory, UserFactory

pytestmark = pytest.mark.django_db


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def remember(user: User, content: str, chat: Chat | None = None) -> Memory:
    return Memory.objects.create(
        user=user, chat=chat, content=content, embedding=pack(np.ones(4, dtype=np.float32)), embedding_model="m@1"
    )


def test_a_user_lists_and_searches_only_their_own_memories() -> None:
    user, other = UserFactory.create(), UserFactory.create()
    chat = ChatFactory.create(owner=user, title="Kitchen")
    oldest = remember(user, "I am vegetarian", chat)
    newest = remember(user, "I live in Lisbon")
    remember(other, "I am vegetarian too")
    listing = client_for(user).get("/api/memories").json()
    assert [m["id"] for m in listing["results"]] == [newest.pk, oldest.pk]
    assert listing["results"][1]["chat"] == chat.pk and listing["results"][1]["chat_title"] == "Kitchen"
    assert listing["results"][0]["chat"] is None
    found = client_for(user).get("/api/memories", {"q": "vegetarian"}).json()["results"]
    assert [m["id"] for m in found] == [oldest.pk]


def test_memories_page_with_a_cursor() -> None:
    user = UserFactory.create()
    made = [remember(user, f"fact number {i}") for i in range(5)]
    first = client_for(user).get("/api/memories", {"limit": 2}).json()
    second = client_for(user).get("/api/memories", {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [m["id"] for m in first["results"] + second["results"]] == [m.pk for m in reversed(made)][:4]


def test_another_users_memory_is_a_404_and_stays() -> None:
    user, other = UserFactory.create(), UserFactory.create()
    theirs = remember(other, "my secret")
    assert client_for(user).get(f"/api/memories/{theirs.pk}").status_code == 404
    assert client_for(user).delete(f"/api/memories/{theirs.pk}").status_code == 404
    assert Memory.objects.filter(pk=theirs.pk).exists()


def test_deleting_removes_the_row_and_the_index_entry() -> None:
    user = UserFactory.create()
    memory = remember(user, "I am vegetarian")
    index = process_index()
    from core.vector_index import IndexedRow, to_unit

    index.add([IndexedRow(id=memory.pk, index_key="k", vector=to_unit(np.ones(4)))])
    assert client_for(user).delete(f"/api/memories/{memory.pk}").status_code == 204
    assert not Memory.objects.filter(pk=memory.pk).exists() and memory.pk not in index


def test_forget_everything_deletes_only_ones_own() -> None:
    user, other = UserFactory.create(), UserFactory.create()
    remember(user, "a")
    remember(user, "b")
    kept = remember(other, "c")
    assert client_for(user).delete("/api/memories").json() == {"deleted": 2}
    assert list(Memory.objects.values_list("id", flat=True)) == [kept.pk]


def test_deleting_a_chat_deletes_its_memories() -> None:
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user)
    remember(user, "from the chat", chat)
    added = remember(user, "added by hand")
    assert client_for(user).delete(f"/api/chats/{chat.pk}").status_code == 204
    assert list(Memory.objects.values_list("id", flat=True)) == [added.pk]


def test_the_switch_is_off_by_default_and_takes_only_a_boolean() -> None:
    user = UserFactory.create()
    client = client_for(user)
    assert client.get("/api/memory").json() == {"enabled": False, "available": True, "count": 0}
    assert client.patch("/api/memory", {}, format="json").json()["enabled"] is False  # a partial update
    for body in ({"enabled": "yes"}, {"enabled": 1}, {"enabled": None}, {"enabled": True, "extra": 1}):
        resp = client.patch("/api/memory", body, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid", body
    user.refresh_from_db()
    assert not user.memory_enabled
    assert client.patch("/api/memory", {"enabled": True}, format="json").json()["enabled"] is True
    user.refresh_from_db()
    assert user.memory_enabled


@pytest.mark.parametrize(
    ("body", "field"),
    [({"content": ""}, "content"), ({"content": "   "}, "content"), ({"content": 5}, "content"), ({}, "content")],
)
def test_adding_bad_content_is_a_400_naming_the_field(body: dict[str, object], field: str) -> None:
    user = UserFactory.create()
    resp = client_for(user).post("/api/memories", body, format="json")
    assert resp.status_code == 400 and field in resp.json()["error"]["fields"]
    assert not Memory.objects.exists()


@pytest.mark.parametrize("registered", [True, False])
def test_adding_without_an_embedding_model_to_use_is_a_503_and_writes_nothing(registered: bool) -> None:
    if not registered:  # no embedding deployment at all: still a 503 to retry, never a 404 for a model never named
        ModelDeployment.objects.filter(kind=DeploymentKind.EMBED).delete()
        forget_cached()
    user = UserFactory.create()
    resp = client_for(user).post("/api/memories", {"content": "I am vegetarian"}, format="json")
    assert resp.status_code == 503, resp.content
    assert "Retry-After" in resp and not Memory.objects.exists()
