"""Feedback-gated rollout steps (fake clock, fabricated runs and ratings): a version whose answers are rated down
more than the margin above the old version's is rolled back, with the reason on the Rollout row; the shares are
compared only with ``min_feedback_ratings`` ratings on both sides."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.utils import timezone

from chats.models import Chat, MessageRole
from deployments.models import ModelDeployment, Rollout, RolloutStatus
from feedback.models import Rating, RunFeedback
from rollouts.health import RolloutThresholds, rollout_judge, rollout_step_health
from runs.models import Run
from tests.deployment_helpers import add_version
from tests.factories import MessageFactory
from tests.rollouts.helpers import FAST, FakeTime, make_runs, rollout, weights

pytestmark = pytest.mark.django_db

GATED = dataclasses.replace(FAST, max_negative_feedback_delta=0.1, min_feedback_ratings=10)


def rate_runs(deployment: ModelDeployment, *, up: int, down: int) -> None:
    """``up + down`` done runs on ``deployment``, each answered and rated by its owner."""
    before = set(Run.objects.filter(deployment=deployment).values_list("pk", flat=True))
    make_runs(deployment, up + down)
    new = Run.objects.filter(deployment=deployment).exclude(pk__in=before).select_related("chat")
    for n, run in enumerate(new):
        answer = MessageFactory.create(chat=run.chat, role=MessageRole.ASSISTANT)
        Run.objects.filter(pk=run.pk).update(assistant_message=answer)
        RunFeedback.objects.create(
            run=run, user_id=run.user_id, deployment=deployment, rating=Rating.DOWN if n < down else Rating.UP
        )


def test_a_version_rated_down_is_rolled_back_with_the_reason(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")

    def traffic(_: int) -> None:
        rate_runs(v2, up=6, down=6)  # 50% down
        rate_runs(v1, up=10, down=2)  # 17% down

    done = rollout(v1.name, "v2", FakeTime(traffic), thresholds=GATED)

    assert done.status == RolloutStatus.ROLLED_BACK
    assert done.reason.startswith("step 1 (10%): negative feedback 50.0% (6 of 12 ratings on")
    assert "+33.3%, worse than the margin of 10.0%" in done.reason
    assert done.history[0]["health"]["target"]["feedback"] == {"up": 6, "down": 6, "negative_rate": 0.5}
    assert weights(v1, v2) == [100, 0]


def test_an_equally_rated_version_goes_through(v1: ModelDeployment) -> None:
    v2 = add_version("v2")

    def traffic(_: int) -> None:
        rate_runs(v2, up=9, down=3)
        rate_runs(v1, up=9, down=3)

    lines: list[str] = []
    done = rollout(v1.name, "v2", FakeTime(traffic), thresholds=GATED, lines=lines)

    assert done.status == RolloutStatus.SUCCEEDED, lines
    assert all("within the margin of 10.0%" in step["verdict"] for step in done.history)


def test_without_the_gate_feedback_is_not_checked(v1: ModelDeployment) -> None:
    v2 = add_version("v2")

    def traffic(_: int) -> None:
        rate_runs(v2, up=0, down=12)
        rate_runs(v1, up=12, down=0)

    assert rollout(v1.name, "v2", FakeTime(traffic)).status == RolloutStatus.SUCCEEDED


def test_too_few_ratings_wait_for_the_timeout_then_pass_saying_so(v1: ModelDeployment) -> None:
    v2 = add_version("v2")

    def traffic(_: int) -> None:  # each 30 s poll: one rating on v2 (down), runs but no rating on v1
        rate_runs(v2, up=0, down=1)
        make_runs(v1, 5)

    fake = FakeTime(traffic)
    done = rollout(v1.name, "v2", fake, thresholds=dataclasses.replace(GATED, min_feedback_ratings=50))

    assert done.status == RolloutStatus.SUCCEEDED
    assert all(step["health"]["timed_out"] for step in done.history)
    assert "feedback not compared" in done.history[0]["verdict"]
    assert fake.now == pytest.approx(4 * GATED.step_timeout_s)


def test_only_the_ratings_of_the_steps_runs_count(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    rate_runs(v2, up=0, down=20)
    Run.objects.update(created_at=timezone.now() - timedelta(hours=1))  # runs from before the step
    since = timezone.now()
    rate_runs(v2, up=10, down=0)
    rate_runs(v1, up=9, down=1)

    health = rollout_step_health(Rollout(name=v1.name, from_deployment=v1, to_deployment=v2), since)

    assert (health.target_feedback.up, health.target_feedback.down) == (10, 0)
    assert (health.baseline_feedback.up, health.baseline_feedback.down) == (9, 1)
    ok, verdict = rollout_judge(
        health, RolloutThresholds(max_negative_feedback_delta=0.0, min_runs=1, min_feedback_ratings=10)
    )
    assert ok and "negative feedback 0.0% (0 of 10 ratings" in verdict
