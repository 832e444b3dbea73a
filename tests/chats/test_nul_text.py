"""Text with NUL characters is stored losslessly (``core.nul_text``): vLLM serves such prompts, so we do too."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message, MessageRole
from chats.services import title_from_text
from core.nul_text import ESCAPE, nul_escape, nul_unescape
from runs.models import Run
from tests.factories import ChatFactory

ALPHABET = st.sampled_from(["\x00", ESCAPE, "0", "a", "\n", "é", "\U0001f600"])


@given(st.text(alphabet=ALPHABET) | st.text())
def test_escaping_round_trips_and_stores_no_nul(text: str) -> None:
    stored = nul_escape(text)
    assert "\x00" not in stored
    assert nul_unescape(stored) == text


def test_text_without_either_character_is_stored_as_it_is() -> None:
    assert nul_escape("plain 0 text \\0") == "plain 0 text \\0"


def _column(message: Message) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM chats_message WHERE id = %s", [message.pk])
        return str(cursor.fetchone()[0])


@pytest.mark.django_db
def test_a_prompt_with_nul_is_accepted_stored_and_returned_exactly(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="")
    content = "before\x00after \ue000 \ue0000"
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": content}, format="json")
    assert resp.status_code == 202, resp.content
    run = Run.objects.select_related("user_message").get(pk=resp.json()["run"]["id"])
    assert run.user_message.content == content
    assert "\x00" not in _column(run.user_message)
    listed = api.get(f"/api/chats/{chat.pk}/messages").json()
    assert [m["content"] for m in listed["results"]] == [content]
    chat.refresh_from_db()
    assert chat.title == "beforeafter \ue000 \ue0000"  # a title is plain text: its NULs are dropped


@pytest.mark.django_db
def test_an_answer_and_a_summary_with_nul_round_trip(user: User) -> None:
    chat = Chat.objects.create(owner=user, summary="s\x00")
    answer = Message.objects.create(chat=chat, role=MessageRole.ASSISTANT, content="\x00\x00")
    Message.objects.filter(pk=answer.pk).update(content="x\x00y")
    assert list(Message.objects.filter(pk=answer.pk).values_list("content", flat=True)) == ["x\x00y"]
    assert Chat.objects.get(pk=chat.pk).summary == "s\x00"


def test_a_title_is_the_first_line_without_nul() -> None:
    """Every chat title (a prompt on /api, a /v1 call, a response) comes from here: its column holds no NUL."""
    assert title_from_text("\n  a\x00b\nsecond") == "ab"
    assert title_from_text("x" * 100) == "x" * 80
    assert title_from_text("\x00 \n") == ""
