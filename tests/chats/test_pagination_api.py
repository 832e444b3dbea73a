"""Cursor pagination of the chat and message lists: order, stability under inserts, bad parameters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message
from core.http.pagination import encode_cursor
from tests.factories import ChatFactory, MessageFactory

pytestmark = pytest.mark.django_db


def fetch_all(
    api: APIClient, url: str, *, limit: int, between_pages: Callable[[int], None] | None = None
) -> list[dict[str, Any]]:
    """Follows next_cursor to the end; ``between_pages(page_number)`` runs after each page is fetched."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    page_number = 0
    while True:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        resp = api.get(url, params)
        assert resp.status_code == 200, resp.content
        body = resp.json()
        assert len(body["results"]) <= limit
        items.extend(body["results"])
        cursor = body["next_cursor"]
        page_number += 1
        if cursor is None:
            return items
        if between_pages:
            between_pages(page_number)
        assert page_number < 100, "pagination does not terminate"


def test_chats_most_recent_activity_first(api: APIClient, user: User) -> None:
    chats = [ChatFactory.create(owner=user) for _ in range(5)]
    base = timezone.now()
    # Activity order differs from creation order: chats[2] was active last, chats[0] next.
    for chat, minutes in zip(chats, [-1, -5, 0, -3, -4], strict=True):
        Chat.objects.filter(pk=chat.pk).update(updated_at=base + timedelta(minutes=minutes))
    ChatFactory.create()  # someone else's chat never shows

    ids = [c["id"] for c in fetch_all(api, "/api/chats", limit=2)]

    assert ids == [chats[i].pk for i in (2, 0, 3, 4, 1)]


def test_posting_a_prompt_moves_the_chat_to_the_top(api: APIClient, user: User) -> None:
    older, newer = ChatFactory.create(owner=user), ChatFactory.create(owner=user)
    assert [c["id"] for c in api.get("/api/chats").json()["results"]] == [newer.pk, older.pk]

    assert api.post(f"/api/chats/{older.pk}/messages", {"content": "hi"}, format="json").status_code == 202

    assert [c["id"] for c in api.get("/api/chats").json()["results"]] == [older.pk, newer.pk]


def test_chat_pages_stable_while_chats_are_created(api: APIClient, user: User) -> None:
    existing = [ChatFactory.create(owner=user).pk for _ in range(11)]
    created_meanwhile: list[int] = []

    def create_chats(_page: int) -> None:
        for _ in range(3):
            created_meanwhile.append(ChatFactory.create(owner=user).pk)

    ids = [c["id"] for c in fetch_all(api, "/api/chats", limit=3, between_pages=create_chats)]

    assert len(ids) == len(set(ids)), "a chat was listed twice"
    assert ids == sorted(existing, reverse=True), "the walk must list exactly the chats that existed, in order"
    assert created_meanwhile and not set(created_meanwhile) & set(ids)
    # A fresh walk sees everything, newest first.
    fresh = [c["id"] for c in fetch_all(api, "/api/chats", limit=4)]
    assert fresh == sorted(existing + created_meanwhile, reverse=True)


def test_chat_pages_stable_when_seen_chats_get_new_messages(api: APIClient, user: User) -> None:
    """Activity on an already listed chat moves it above the cursor: it is not listed again."""
    existing = [ChatFactory.create(owner=user).pk for _ in range(9)]
    ids: list[int] = []
    cursor = None
    while True:
        body = api.get("/api/chats", {"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        ids.extend(c["id"] for c in body["results"])
        cursor = body["next_cursor"]
        if not cursor:
            break
        resp = api.post(f"/api/chats/{ids[-1]}/messages", {"content": "more"}, format="json")
        assert resp.status_code == 202

    assert len(ids) == len(set(ids))
    assert ids == sorted(existing, reverse=True)


def test_chat_pages_break_timestamp_ties_by_id(api: APIClient, user: User) -> None:
    chats = [ChatFactory.create(owner=user).pk for _ in range(7)]
    same_moment = timezone.now()
    Chat.objects.filter(pk__in=chats).update(updated_at=same_moment)

    ids = [c["id"] for c in fetch_all(api, "/api/chats", limit=2)]

    assert ids == sorted(chats, reverse=True)


def test_messages_newest_first_stable_while_messages_are_added(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    existing = [MessageFactory.create(chat=chat).pk for _ in range(10)]
    MessageFactory.create()  # a message in another chat never shows
    added: list[int] = []

    def add_messages(_page: int) -> None:
        added.extend(MessageFactory.create(chat=chat).pk for _ in range(2))

    ids = [m["id"] for m in fetch_all(api, f"/api/chats/{chat.pk}/messages", limit=3, between_pages=add_messages)]

    assert len(ids) == len(set(ids)), "a message was listed twice"
    assert ids == sorted(existing, reverse=True), "no gaps: every message older than the first page is listed"
    assert added
    fresh = [m["id"] for m in fetch_all(api, f"/api/chats/{chat.pk}/messages", limit=5)]
    assert fresh == sorted(existing + added, reverse=True)


def test_message_pages_break_timestamp_ties_by_id(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    ids_created = [MessageFactory.create(chat=chat).pk for _ in range(5)]
    Message.objects.filter(pk__in=ids_created).update(created_at=timezone.now())

    ids = [m["id"] for m in fetch_all(api, f"/api/chats/{chat.pk}/messages", limit=2)]

    assert ids == sorted(ids_created, reverse=True)


def test_limit_defaults_to_20_and_last_page_has_no_cursor(api: APIClient, user: User) -> None:
    for _ in range(21):
        ChatFactory.create(owner=user)
    first = api.get("/api/chats").json()
    assert len(first["results"]) == 20 and first["next_cursor"]
    second = api.get("/api/chats", {"cursor": first["next_cursor"]}).json()
    assert len(second["results"]) == 1 and second["next_cursor"] is None


def test_exactly_one_full_page_has_no_next_cursor(api: APIClient, user: User) -> None:
    for _ in range(3):
        ChatFactory.create(owner=user)
    body = api.get("/api/chats", {"limit": 3}).json()
    assert len(body["results"]) == 3 and body["next_cursor"] is None


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc", "1.5", "²", "9" * 40, ""])
@pytest.mark.parametrize("which", ["chats", "messages"])
def test_invalid_limit_is_400(api: APIClient, user: User, limit: str, which: str) -> None:
    chat = ChatFactory.create(owner=user)
    url = "/api/chats" if which == "chats" else f"/api/chats/{chat.pk}/messages"
    resp = api.get(url, {"limit": limit})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_limit"
    assert "limit" in resp.json()["error"]["message"]


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!!",
        "x" * 500,
        encode_cursor(timezone.now(), 1)[:-3],  # truncated
        "MjAyNi0wMS0wMVQwMDowMDowMHwx",  # "2026-01-01T00:00:00|1": naive timestamp
        encode_cursor(timezone.now(), 2**70),  # id beyond bigint: must not reach the database
        encode_cursor(timezone.now(), 0),
    ],
)
@pytest.mark.parametrize("which", ["chats", "messages"])
def test_invalid_cursor_is_400(api: APIClient, user: User, cursor: str, which: str) -> None:
    chat = ChatFactory.create(owner=user)
    url = "/api/chats" if which == "chats" else f"/api/chats/{chat.pk}/messages"
    resp = api.get(url, {"cursor": cursor})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_cursor"
