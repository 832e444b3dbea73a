"""``PUT/DELETE /api/runs/{id}/feedback``: one rating per run, only one's own finished answers, shown on the run
and in the message list."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import User
from feedback.models import RunFeedback
from runs.models import Run
from tests.chat_turns import turn
from tests.factories import ChatFactory, RunFactory
from tests.monitoring.test_metrics import scrape, value

pytestmark = pytest.mark.django_db


def _rated_run(api: APIClient, user: User) -> int:
    chat = ChatFactory.create(owner=user)
    return int(turn(api, chat.pk, "Hello?", "Hi there.")["run"]["id"])


def test_a_rating_is_stored_replaced_shown_and_taken_back(api: APIClient, user: User) -> None:
    run_id = _rated_run(api, user)

    resp = api.put(f"/api/runs/{run_id}/feedback", {"rating": "down", "reason": "too short"}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["run"] == run_id and resp.json()["rating"] == "down" and resp.json()["reason"] == "too short"
    assert "updated_at" in resp.json()
    again = api.put(f"/api/runs/{run_id}/feedback", {"rating": "up"}, format="json")
    assert again.status_code == 200
    row = RunFeedback.objects.get(run_id=run_id)
    assert (row.rating, row.reason, row.user_id) == ("up", "", user.pk)
    assert row.deployment_id == Run.objects.get(pk=run_id).deployment_id is not None
    assert RunFeedback.objects.count() == 1

    assert api.get(f"/api/runs/{run_id}").json()["feedback"] == {"rating": "up", "reason": ""}
    chat_id = Run.objects.get(pk=run_id).chat_id
    answer = api.get(f"/api/chats/{chat_id}/messages").json()["results"][0]
    assert answer["role"] == "assistant" and answer["run"] == run_id
    assert answer["feedback"] == {"rating": "up", "reason": ""}

    assert api.delete(f"/api/runs/{run_id}/feedback").status_code == 204
    assert api.delete(f"/api/runs/{run_id}/feedback").status_code == 204  # idempotent
    assert api.get(f"/api/runs/{run_id}").json()["feedback"] is None


def test_another_users_run_is_404_and_unchanged(api: APIClient, other_api: APIClient, user: User) -> None:
    run_id = _rated_run(api, user)
    api.put(f"/api/runs/{run_id}/feedback", {"rating": "up"}, format="json")

    assert other_api.put(f"/api/runs/{run_id}/feedback", {"rating": "down"}, format="json").status_code == 404
    assert other_api.delete(f"/api/runs/{run_id}/feedback").status_code == 404
    assert RunFeedback.objects.get(run_id=run_id).rating == "up"
    assert api.put("/api/runs/99999999/feedback", {"rating": "up"}, format="json").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"rating": "meh"}, "rating"),
        ({}, "rating"),
        ({"rating": 1}, "rating"),
        ({"rating": "up", "reason": "x" * 1001}, "reason"),
        ({"rating": "up", "reason": 5}, "reason"),
        ({"rating": "up", "stars": 5}, "stars"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(api: APIClient, user: User, body: dict[str, object], field: str) -> None:
    run_id = _rated_run(api, user)
    resp = api.put(f"/api/runs/{run_id}/feedback", body, format="json")
    assert resp.status_code == 400
    assert field in resp.json()["error"]["fields"]
    assert not RunFeedback.objects.exists()


def test_an_unfinished_run_cannot_be_rated(api: APIClient, user: User) -> None:
    run = RunFactory.create(chat=ChatFactory.create(owner=user))  # queued
    resp = api.put(f"/api/runs/{run.pk}/feedback", {"rating": "up"}, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "not_rateable"
    assert not RunFeedback.objects.exists()


def test_the_ratings_show_per_version_in_metrics_and_in_the_admin(api: APIClient, user: User) -> None:
    up, down, other = (_rated_run(api, user) for _ in range(3))
    api.put(f"/api/runs/{up}/feedback", {"rating": "up"}, format="json")
    api.put(f"/api/runs/{down}/feedback", {"rating": "down", "reason": "wrong"}, format="json")
    api.put(f"/api/runs/{other}/feedback", {"rating": "down"}, format="json")
    deployment = Run.objects.select_related("deployment").get(pk=up).deployment
    assert deployment is not None
    samples = scrape()
    assert value(samples, "chat_feedback_ratings", deployment=deployment.key, rating="up") == 1
    assert value(samples, "chat_feedback_ratings", deployment=deployment.key, rating="down") == 2

    two_days_ago = timezone.now() - dt.timedelta(days=2)
    RunFeedback.objects.filter(run_id=other).update(updated_at=two_days_ago)  # a day of its own in the admin
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = admin.get("/admin/feedback/runfeedback/")
    assert page.status_code == 200
    text = page.content.decode()
    assert deployment.key in text and "66.7%" in text  # 2 of 3 ratings down, for that version
    days = [(row["day"], row["version"], row["tally"].up, row["tally"].down) for row in page.context["feedback_days"]]
    assert days == [
        (timezone.now().astimezone(dt.UTC).date(), deployment.key, 1, 1),
        (two_days_ago.astimezone(dt.UTC).date(), deployment.key, 0, 1),
    ]
    assert "50.0%" in text and "100.0%" in text  # each day's negative rate
