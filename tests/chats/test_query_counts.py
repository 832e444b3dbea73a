"""The list endpoints run a fixed number of queries whatever the page size (no N+1)."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import DjangoAssertNumQueries
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import MessageRole
from feedback.models import RunFeedback
from runs.models import RunStatus
from tests.factories import ChatFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_chat_list_query_count(
    api: APIClient, user: User, rows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    for _ in range(rows):
        chat = ChatFactory.create(owner=user)
        RunFactory.create(chat=chat, status=RunStatus.DONE)

    with django_assert_num_queries(1):  # the page
        resp = api.get("/api/chats", {"limit": 100})

    assert len(resp.json()["results"]) == rows


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_message_list_query_count(
    api: APIClient, user: User, rows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    chat = ChatFactory.create(owner=user)
    for _ in range(rows):
        MessageFactory.create(chat=chat)

    with django_assert_num_queries(2):  # the chat (ownership), the page
        resp = api.get(f"/api/chats/{chat.pk}/messages", {"limit": 100})

    assert len(resp.json()["results"]) == rows


@pytest.mark.parametrize("rows", [1, 30])
def test_token_authenticated_list_query_count(
    user: User, rows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    for _ in range(rows):
        ChatFactory.create(owner=user)

    with django_assert_num_queries(2):  # the token with its user, the page
        resp = client.get("/api/chats", {"limit": 100})

    assert len(resp.json()["results"]) == rows


def test_following_a_cursor_costs_no_extra_queries(
    api: APIClient, user: User, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    chat = ChatFactory.create(owner=user)
    for _ in range(12):
        MessageFactory.create(chat=chat)
    cursor = api.get(f"/api/chats/{chat.pk}/messages", {"limit": 5}).json()["next_cursor"]

    with django_assert_num_queries(2):
        resp = api.get(f"/api/chats/{chat.pk}/messages", {"limit": 5, "cursor": cursor})

    assert len(resp.json()["results"]) == 5


@pytest.mark.parametrize("rows", [1, 5, 20])
def test_message_list_with_answers_versions_and_feedback_query_count(
    api: APIClient, user: User, rows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:

    chat = ChatFactory.create(owner=user)
    for _ in range(rows):
        prompt = MessageFactory.create(chat=chat)
        old = MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, superseded=True)
        RunFactory.create(chat=chat, user_message=prompt, assistant_message=old, status=RunStatus.DONE)
        new = MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT)
        run = RunFactory.create(chat=chat, user_message=prompt, assistant_message=new, status=RunStatus.DONE)
        RunFeedback.objects.create(run=run, user=user, rating="up")

    with django_assert_num_queries(3):  # the chat (ownership), the page, the runs behind its answers
        resp = api.get(f"/api/chats/{chat.pk}/messages", {"limit": 100})

    results = resp.json()["results"]
    assert len(results) == 2 * rows
    answers = [m for m in results if m["role"] == "assistant"]
    assert all(len(m["versions"]) == 1 and m["feedback"] == {"rating": "up", "reason": ""} for m in answers)
