"""The run lifecycle's log records (``runs.lifecycle_log``, on the ``runs.events`` logger): one per step, each with
the fields that follow a run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.conf import settings
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from accounts.models import User, UserLimitOverride
from core.logs import record_fields
from generation.worker_contract import GenerateMessage
from runs.lifecycle import run_fail, run_requeue_orphan
from runs.models import Run, RunStatus
from runs.routing import send_to_worker
from tests.factories import ChatFactory, RunFactory

pytestmark = pytest.mark.django_db


def run_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The ``runs.events`` records logged so far: their structured fields, with ``level`` and ``message``."""
    return [
        record_fields(r) | {"level": r.levelno, "message": r.getMessage()}
        for r in caplog.records
        if r.name == "runs.events"
    ]


@pytest.fixture
def events(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="runs.events")
    return caplog


def post_prompt(api: APIClient, user: User, captured: DjangoCaptureOnCommitCallbacks) -> int:
    chat = ChatFactory.create(owner=user)
    with captured(execute=True):  # the run is handed on (admitted, queued) when its transaction commits
        resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello", "max_tokens": 32}, format="json")
    assert resp.status_code == 202, resp.content
    return int(resp.json()["run"]["id"])


def test_a_posted_prompt_logs_admitted_then_queued_with_its_fields(
    api: APIClient,
    user: User,
    events: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    run_id = post_prompt(api, user, django_capture_on_commit_callbacks)

    admitted, queued = run_events(events)
    assert (admitted["event"], queued["event"]) == ("admitted", "queued")
    for record in (admitted, queued):
        assert record["level"] == logging.INFO
        assert record["run_id"] == run_id
        assert record["user_id"] == user.pk
        assert record["tier"] == "free"
        assert record["deployment"] == settings.ENGINE.served_model_name
        assert record["worker"] == ""
    assert admitted["max_tokens"] == 32
    assert admitted["reserved_tokens"] == Run.objects.get(pk=run_id).reserved_tokens
    assert f"run {run_id} admitted" in admitted["message"]


def test_a_refused_prompt_logs_refused_with_its_reason(
    api: APIClient,
    user: User,
    events: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=1)
    post_prompt(api, user, django_capture_on_commit_callbacks)
    events.clear()

    resp = api.post(f"/api/chats/{ChatFactory.create(owner=user).pk}/messages", {"content": "again"}, format="json")

    assert resp.status_code == 429
    [refused] = run_events(events)
    assert (refused["event"], refused["reason"]) == ("refused", "concurrency")
    assert refused["run_id"] is None and refused["user_id"] == user.pk
    assert refused["tier"] == "free" and refused["worker"] == ""


def test_cancelling_a_queued_run_logs_cancelled(
    api: APIClient,
    user: User,
    events: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    run_id = post_prompt(api, user, django_capture_on_commit_callbacks)
    events.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(f"/api/runs/{run_id}/cancel").status_code == 200

    [cancelled] = run_events(events)
    assert cancelled["event"] == "cancelled"
    assert (cancelled["run_id"], cancelled["user_id"], cancelled["tier"]) == (run_id, user.pk, "free")
    assert (cancelled["status"], cancelled["finish_reason"]) == (RunStatus.CANCELLED, "cancelled")
    assert cancelled["output_tokens"] == 0


def test_dispatch_logs_dispatched_with_its_queue(
    events: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, str, int | None]] = []

    def send_generates(messages: list[GenerateMessage]) -> list[Exception | None]:
        sent.extend((m.run_id, m.queue, m.engine_priority) for m in messages)
        return [None] * len(messages)

    monkeypatch.setattr("runs.routing.send_generates", send_generates)
    run = RunFactory.create()

    send_to_worker(run_id=run.pk, queue="free", engine_priority=21)

    assert sent == [(run.pk, "free", 21)]
    [dispatched] = run_events(events)
    assert (dispatched["event"], dispatched["queue"], dispatched["engine_priority"]) == ("dispatched", "free", 21)
    assert dispatched["route"] == "no_previous_worker"
    assert (dispatched["run_id"], dispatched["user_id"], dispatched["tier"]) == (run.pk, run.user_id, "free")


def test_an_orphan_requeued_by_the_reaper_logs_requeued_then_queued(
    events: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host")

    with django_capture_on_commit_callbacks(execute=True):
        assert run_requeue_orphan(run_id=run.pk, worker="dead@host") is not None

    requeued, queued = run_events(events)
    assert (requeued["event"], queued["event"]) == ("requeued", "queued")
    assert requeued["level"] == logging.WARNING
    assert (requeued["worker"], requeued["reason"]) == ("dead@host", "worker_lost")
    assert requeued["run_id"] == queued["run_id"] == run.pk
    assert queued["worker"] == ""


def test_a_failed_run_logs_failed_with_its_error(
    events: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="w@host")

    with django_capture_on_commit_callbacks(execute=True):
        run_fail(run_id=run.pk, error="The engine failed: boom")

    [failed] = run_events(events)
    assert (failed["event"], failed["level"]) == ("failed", logging.WARNING)
    assert (failed["error"], failed["worker"]) == ("The engine failed: boom", "w@host")
