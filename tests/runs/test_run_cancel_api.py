"""GET /api/runs/{id} and POST /api/runs/{id}/cancel (idempotent)."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from accounts.models import User
from runs.models import FinishReason, Run, RunStatus
from tests.factories import ChatFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db


def queued_run(api: APIClient, user: User) -> int:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello"}, format="json")
    assert resp.status_code == 202
    return int(resp.json()["run"]["id"])


def test_get_run(api: APIClient, user: User) -> None:
    run_id = queued_run(api, user)
    body = api.get(f"/api/runs/{run_id}").json()
    assert body["id"] == run_id
    assert body["status"] == "queued"
    assert body["assistant_message"] is None
    assert body["stream_url"] == f"/api/runs/{run_id}/stream"


def test_get_finished_run_includes_the_answer(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    answer = MessageFactory.create(chat=chat, role="assistant", content="Paris.", token_count=3)
    run = RunFactory.create(chat=chat, status=RunStatus.DONE, assistant_message=answer, finish_reason=FinishReason.STOP)
    body = api.get(f"/api/runs/{run.pk}").json()
    assert body["status"] == "done" and body["finish_reason"] == "stop"
    assert body["assistant_message"] == {"id": answer.pk, "content": "Paris.", "token_count": 3}


def test_cancel_queued_run_twice_returns_the_same_final_run(api: APIClient, user: User) -> None:
    run_id = queued_run(api, user)

    first = api.post(f"/api/runs/{run_id}/cancel")
    second = api.post(f"/api/runs/{run_id}/cancel")

    assert first.status_code == second.status_code == 200
    assert first.json()["status"] == "cancelled"
    assert first.json()["finish_reason"] == "cancelled"
    assert first.json()["finished_at"] is not None
    assert first.json() == second.json()
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and run.assistant_message is None


def test_cancel_streaming_run_moves_it_to_cancelling_and_signals_after_commit(
    api: APIClient, user: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    run = RunFactory.create(chat=ChatFactory.create(owner=user), status=RunStatus.STREAMING)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = api.post(f"/api/runs/{run.pk}/cancel")
    again = api.post(f"/api/runs/{run.pk}/cancel")

    assert resp.json()["status"] == again.json()["status"] == "cancelling"
    assert len(callbacks) == 1, "the worker is signalled once the transition is committed"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLING and run.finished_at is None


@pytest.mark.parametrize("status", [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED])
def test_cancel_finished_run_returns_it_unchanged(api: APIClient, user: User, status: RunStatus) -> None:
    run = RunFactory.create(chat=ChatFactory.create(owner=user), status=status)
    before = api.get(f"/api/runs/{run.pk}").json()

    resp = api.post(f"/api/runs/{run.pk}/cancel")

    assert resp.status_code == 200
    assert resp.json() == before
    run.refresh_from_db()
    assert run.status == status
