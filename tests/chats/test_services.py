"""chats.selectors and the chat writes (``runs.services.chat_delete`` ends the runs first), below the API."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import Http404
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from accounts.models import User
from chats import selectors, services
from chats.models import Chat, Message
from runs import services as run_services
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db


def test_chat_create_and_update(user: User) -> None:
    chat = services.chat_create(user=user, title="first")
    assert Chat.objects.get(pk=chat.pk).owner == user
    activity = chat.updated_at

    services.chat_update(chat=chat, title="renamed")

    chat.refresh_from_db()
    assert chat.title == "renamed"
    assert chat.updated_at == activity  # a rename is not activity: the chat keeps its place in the list


def test_chat_delete_removes_messages_and_runs_but_nothing_else(user: User, other_user: User) -> None:
    chat = ChatFactory.create(owner=user)
    RunFactory.create(chat=chat, status=RunStatus.DONE)
    MessageFactory.create(chat=chat)
    other_chat = ChatFactory.create(owner=user)
    kept_run = RunFactory.create(chat=other_chat, status=RunStatus.QUEUED)

    run_services.chat_delete(chat=chat)

    assert not Chat.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(chat_id=chat.pk).exists()
    assert not Run.objects.filter(chat_id=chat.pk).exists()
    kept_run.refresh_from_db()
    assert kept_run.status == RunStatus.QUEUED
    assert Message.objects.filter(chat=other_chat).count() == 1


def test_chat_delete_cancels_a_streaming_run_so_the_worker_aborts_it(
    user: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    chat = ChatFactory.create(owner=user)
    RunFactory.create(chat=chat, status=RunStatus.STREAMING)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run_services.chat_delete(chat=chat)

    assert len(callbacks) == 1, "the abort signal for the streaming run goes out after the delete commits"
    assert not Chat.objects.filter(pk=chat.pk).exists()


def test_chat_delete_cancels_each_active_run(user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    chat = ChatFactory.create(owner=user)
    active = RunFactory.create(chat=chat, status=RunStatus.QUEUED)
    RunFactory.create(chat=chat, status=RunStatus.DONE)
    RunFactory.create(chat=chat, status=RunStatus.FAILED)
    seen: list[tuple[int, str]] = []
    real_cancel = run_services.run_cancel

    def recording_cancel(*, run: Run) -> Run:
        result = real_cancel(run=run)
        seen.append((run.pk, result.status))
        return result

    monkeypatch.setattr(run_services, "run_cancel", recording_cancel)

    run_services.chat_delete(chat=chat)

    assert seen == [(active.pk, RunStatus.CANCELLED)]
    assert not Run.objects.filter(chat_id=chat.pk).exists()


def test_chat_get_scopes_to_the_owner(user: User, other_user: User) -> None:
    chat = ChatFactory.create(owner=other_user)
    with pytest.raises(Http404):
        selectors.chat_get(user=user, chat_id=chat.pk)
    assert selectors.chat_get(user=other_user, chat_id=chat.pk) == chat


def test_chat_list_and_message_list_scope(user: User, other_user: User) -> None:
    mine = ChatFactory.create(owner=user)
    ChatFactory.create(owner=other_user)
    message = MessageFactory.create(chat=mine)
    MessageFactory.create()
    assert list(selectors.chat_list(user=user)) == [mine]
    assert list(selectors.message_list(chat=mine)) == [message]


def test_a_row_deleted_under_a_request_is_404_not_500(
    api: APIClient, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat deleted between the ownership check and the write: the service's DoesNotExist becomes a 404."""
    chat = ChatFactory.create(owner=user)
    real_create = run_services.run_create

    def create_after_concurrent_delete(**kwargs: Any) -> Run:
        Chat.objects.filter(pk=chat.pk).delete()
        return real_create(**kwargs)

    monkeypatch.setattr(run_services, "run_create", create_after_concurrent_delete)

    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hi"}, format="json")

    assert resp.status_code == 404
    assert not Message.objects.exists()
