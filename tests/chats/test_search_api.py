"""``GET /api/chats/search``: full-text over one's own web chats' titles and messages, safe with any input."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import DjangoAssertNumQueries
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, ChatOrigin, Message, MessageRole
from tests.factories import ChatFactory, MessageFactory

pytestmark = pytest.mark.django_db


def _search(api: APIClient, q: str, **params: object) -> list[dict[str, object]]:
    resp = api.get("/api/chats/search", {"q": q, **params})
    assert resp.status_code == 200, resp.content
    results: list[dict[str, object]] = resp.json()["results"]
    return results


def test_finds_messages_and_titles_with_snippets(api: APIClient, user: User) -> None:
    trip = ChatFactory.create(owner=user, title="Holiday plans")
    MessageFactory.create(chat=trip, content="Which train goes to Paris on Sunday morning?")
    hit = MessageFactory.create(chat=trip, role=MessageRole.ASSISTANT, content="The TGV leaves for Paris at nine.")
    cooking = ChatFactory.create(owner=user, title="Paris recipes")
    MessageFactory.create(chat=ChatFactory.create(owner=user, title="other"), content="nothing here")

    results = _search(api, "paris")
    by_chat = {r["chat"]: r for r in results}
    assert set(by_chat) == {trip.pk, cooking.pk}
    assert by_chat[trip.pk]["message"] == hit.pk  # the newest matching message
    snippet = str(by_chat[trip.pk]["snippet"])
    assert "<" not in snippet and "Paris" in snippet
    (start, end), *_ = by_chat[trip.pk]["highlights"]  # type: ignore[misc]
    assert snippet[start:end] == "Paris"
    assert by_chat[cooking.pk]["message"] is None and by_chat[cooking.pk]["snippet"] == "Paris recipes"
    assert _search(api, '"goes to paris"')[0]["chat"] == trip.pk  # web-search phrase syntax
    assert {r["chat"] for r in _search(api, "recipes or tgv")} == {trip.pk, cooking.pk}


def test_never_another_users_chats_nor_api_records_nor_superseded_answers(
    api: APIClient, user: User, other_user: User
) -> None:
    MessageFactory.create(chat=ChatFactory.create(owner=other_user, title="zebra"), content="zebra stripes")
    MessageFactory.create(chat=Chat.objects.create(owner=user, origin=ChatOrigin.API), content="zebra from /v1")
    mine = ChatFactory.create(owner=user)
    MessageFactory.create(chat=mine, role=MessageRole.ASSISTANT, content="old zebra answer", superseded=True)
    assert _search(api, "zebra") == []


@pytest.mark.parametrize(
    "q",
    ["'; DROP TABLE chats_chat; --", "%_", "\\", "100%", "a' OR '1'='1", "& | ! ( ) :*", '"unclosed', "-"],
)
def test_sql_like_input_is_only_words(api: APIClient, user: User, q: str) -> None:
    MessageFactory.create(chat=ChatFactory.create(owner=user), content="a perfectly ordinary message")
    results = _search(api, q)
    assert isinstance(results, list)
    assert Chat.objects.filter(owner=user).exists() and Message.objects.exists()  # nothing dropped


def test_sql_words_are_found_as_words(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    MessageFactory.create(chat=chat, content="How do I DROP TABLE safely in Postgres?")
    assert [r["chat"] for r in _search(api, "'; DROP TABLE")] == [chat.pk]


def test_unicode(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="Ünïcödé")
    MessageFactory.create(chat=chat, content="Добрый день, как дела? 東京 は 晴れ 🌞")
    assert [r["chat"] for r in _search(api, "добрый")] == [chat.pk]
    assert [r["chat"] for r in _search(api, "ÜNÏCÖDÉ")] == [chat.pk]
    assert [r["chat"] for r in _search(api, "東京")] == [chat.pk]
    assert _search(api, "🌞") == []  # an emoji is no lexeme to the parser: nothing found, and no error


@pytest.mark.parametrize("params", [{}, {"q": ""}, {"q": "   "}, {"q": "x" * 201}, {"q": "a", "limit": "0"}])
def test_bad_queries_are_400(api: APIClient, params: dict[str, str]) -> None:
    resp = api.get("/api/chats/search", params)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"]


def test_pages_like_the_chat_list(api: APIClient, user: User) -> None:
    chats = [ChatFactory.create(owner=user) for _ in range(5)]
    for chat in chats:
        MessageFactory.create(chat=chat, content="kangaroo")
    first = api.get("/api/chats/search", {"q": "kangaroo", "limit": 3}).json()
    second = api.get("/api/chats/search", {"q": "kangaroo", "limit": 3, "cursor": first["next_cursor"]}).json()
    seen = [r["chat"] for r in first["results"] + second["results"]]
    assert sorted(seen) == sorted(c.pk for c in chats) and second["next_cursor"] is None


@pytest.mark.parametrize("rows", [1, 20])
def test_search_query_count(
    api: APIClient, user: User, rows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    for _ in range(rows):
        MessageFactory.create(chat=ChatFactory.create(owner=user), content="wombat")
    with django_assert_num_queries(2):  # the page of chats, their newest matching messages
        assert len(_search(api, "wombat", limit=100)) == rows
