"""Cross-chat memory end to end through ``POST /api/chats/{id}/messages`` and the real embedding worker: what a user
said in chat A is recalled into chat B's prompt (the one the worker renders), never into another user's, never
from the chat being answered, never once deleted, and never while the user or their tier has memory off."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat
from inference_workers.prompting import build_run_prompt
from memory.models import Memory, MemoryPolicy
from memory.selectors import forget_memory_policies
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

FACT = "My daughter Maya is severely allergic to peanuts."
QUESTION = "Is peanut butter safe for my daughter Maya?"
UNRELATED = "How do I change a flat tyre on a bicycle?"


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def opt_in(user: User) -> None:
    assert client_for(user).patch("/api/memory", {"enabled": True}, format="json").status_code == 200


def post(user: User, chat: Chat, content: str, capture: Any) -> Run:
    with capture(execute=True):
        resp = client_for(user).post(f"/api/chats/{chat.pk}/messages", {"content": content}, format="json")
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    # the next prompt of this chat may be posted: the run is left as if it had been answered
    Run.objects.filter(pk=run.pk).update(status=RunStatus.DONE)
    return run


def memory_record(run: Run) -> dict[str, Any] | None:
    found = [p for p in run.passes if p["pass"] == "memory"]
    return found[0] if found else None


def test_a_memory_from_chat_a_is_in_chat_b_prompt_and_never_in_another_users(
    django_capture_on_commit_callbacks: Any,
) -> None:
    owner, other = UserFactory.with_tier("pro"), UserFactory.with_tier("pro")
    opt_in(owner)
    opt_in(other)
    chat_a, chat_b = ChatFactory.create(owner=owner), ChatFactory.create(owner=owner)
    said = post(owner, chat_a, FACT, django_capture_on_commit_callbacks)
    assert memory_record(said)["decision"] == "none"  # type: ignore[index]  # nothing to recall yet
    memory = Memory.objects.get(user=owner)
    assert (memory.content, memory.chat_id, memory.message_id) == (FACT, chat_a.pk, said.user_message_id)

    asked = post(owner, chat_b, QUESTION, django_capture_on_commit_callbacks)

    record = memory_record(asked)
    assert record is not None and record["decision"] == "recalled" and record["memories"] == [memory.pk]
    assert record["similarities"][0] >= MemoryPolicy().min_similarity
    prompt = build_run_prompt(run=asked)
    assert FACT in prompt and prompt.index(FACT) < prompt.index(QUESTION)

    theirs = post(other, ChatFactory.create(owner=other), QUESTION, django_capture_on_commit_callbacks)

    assert memory_record(theirs)["decision"] == "none"  # type: ignore[index]
    assert "peanuts" not in build_run_prompt(run=theirs)


def test_the_chat_being_answered_and_unrelated_prompts_recall_nothing(django_capture_on_commit_callbacks: Any) -> None:
    user = UserFactory.with_tier("pro")
    opt_in(user)
    chat = ChatFactory.create(owner=user)
    post(user, chat, FACT, django_capture_on_commit_callbacks)
    same_chat = post(user, chat, QUESTION, django_capture_on_commit_callbacks)
    assert memory_record(same_chat)["decision"] == "none"  # type: ignore[index]  # it is in this chat already
    unrelated = post(user, ChatFactory.create(owner=user), UNRELATED, django_capture_on_commit_callbacks)
    assert memory_record(unrelated)["decision"] == "none"  # type: ignore[index]


def test_a_deleted_memory_is_never_recalled_even_by_a_run_queued_before(
    django_capture_on_commit_callbacks: Any,
) -> None:
    user = UserFactory.with_tier("pro")
    opt_in(user)
    post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)
    memory = Memory.objects.get(user=user)
    queued = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)
    assert memory_record(queued)["memories"] == [memory.pk]  # type: ignore[index]

    assert client_for(user).delete(f"/api/memories/{memory.pk}").status_code == 204

    assert "peanuts" not in build_run_prompt(run=queued)  # the worker reads the memory's row: gone
    again = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)
    # (the question asked in the queued run's chat is a memory of its own by now, and may be recalled)
    assert memory.pk not in memory_record(again).get("memories", [])  # type: ignore[union-attr]
    assert FACT not in build_run_prompt(run=again)


def test_memory_off_for_the_user_keeps_and_recalls_nothing(django_capture_on_commit_callbacks: Any) -> None:
    user = UserFactory.with_tier("pro")
    run = post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)
    assert memory_record(run) is None and not Memory.objects.filter(user=user).exists()
    opt_in(user)
    post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)
    assert client_for(user).patch("/api/memory", {"enabled": False}, format="json").json()["enabled"] is False
    later = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)
    assert memory_record(later) is None and "peanuts" not in build_run_prompt(run=later)
    assert Memory.objects.filter(user=user).count() == 1  # kept until deleted


def test_a_tier_switched_off_recalls_nothing_and_cannot_be_opted_into(
    django_capture_on_commit_callbacks: Any,
) -> None:
    user = UserFactory.with_tier("pro")
    opt_in(user)
    post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)
    MemoryPolicy.objects.update_or_create(tier=user.tier, defaults={"enabled": False})
    forget_memory_policies()

    later = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)

    assert memory_record(later) is None and "peanuts" not in build_run_prompt(run=later)
    client = client_for(user)
    assert client.get("/api/memory").json() == {"enabled": True, "available": False, "count": 1}  # their choice stays
    assert client.patch("/api/memory", {"enabled": False}, format="json").status_code == 200  # off is always allowed
    refused = client.patch("/api/memory", {"enabled": True}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "memory_unavailable"
    user.refresh_from_db()
    assert not user.memory_enabled


def test_a_memory_added_by_hand_is_recalled(django_capture_on_commit_callbacks: Any) -> None:
    user = UserFactory.with_tier("pro")
    opt_in(user)
    added = client_for(user).post("/api/memories", {"content": FACT}, format="json")
    assert added.status_code == 201 and added.json()["chat"] is None
    asked = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)
    assert memory_record(asked)["memories"] == [added.json()["id"]], asked.passes  # type: ignore[index]


def test_a_repeated_prompt_is_kept_once_and_copies_are_recalled_once(django_capture_on_commit_callbacks: Any) -> None:
    user = UserFactory.with_tier("pro")
    opt_in(user)
    post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)
    again = post(user, ChatFactory.create(owner=user), f"  {FACT}", django_capture_on_commit_callbacks)
    assert Memory.objects.filter(user=user).count() == 1  # already remembered: not kept twice
    assert memory_record(again)["decision"] == "recalled"  # type: ignore[index]
    for _ in range(2):  # copies added by hand are kept (the user asked), but recalled once
        assert client_for(user).post("/api/memories", {"content": FACT.upper()}, format="json").status_code == 201
    asked = post(user, ChatFactory.create(owner=user), QUESTION, django_capture_on_commit_callbacks)
    record = memory_record(asked)
    assert record is not None and len(record["memories"]) == 1


def test_memory_costs_an_opted_in_prompt_three_round_trips_and_others_none(
    django_capture_on_commit_callbacks: Any,
) -> None:
    user, other = UserFactory.with_tier("pro"), UserFactory.with_tier("pro")
    opt_in(user)
    post(user, ChatFactory.create(owner=user), FACT, django_capture_on_commit_callbacks)

    def memory_queries(who: User) -> list[str]:
        chat = ChatFactory.create(owner=who)
        with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
            resp = client_for(who).post(f"/api/chats/{chat.pk}/messages", {"content": QUESTION}, format="json")
        assert resp.status_code == 202
        return [q["sql"] for q in queries.captured_queries if '"memory_memory"' in q["sql"]]  # not the policy

    found = memory_queries(user)
    # The index's catch-up (due on every recall here: MEMORY_SYNC_MS=0; at most every 200 ms in production), the
    # recalled rows' check, the prompt kept as a memory. (The tier's policy is a per-process snapshot.)
    assert len(found) == 3, found
    assert found[2].startswith('INSERT INTO "memory_memory"')
    assert memory_queries(other) == []  # memory off: not a single query
