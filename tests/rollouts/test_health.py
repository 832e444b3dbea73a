"""The health check of a rollout's step: the figures of its runs and the verdict."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chats.models import Chat
from deployments.models import ModelDeployment
from rollouts.health import RolloutThresholds, StepHealth, VersionFigures, rollout_judge, rollout_step_health
from rollouts.services import (
    rollout_start,
)
from runs.models import RunStatus
from tests.deployment_helpers import add_version
from tests.rollouts.helpers import FAST, make_runs

pytestmark = pytest.mark.django_db


# -- the health check ----------------------------------------------------------------------------------------


def test_step_health_counts_the_runs_created_since_the_step_began(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    since = timezone.now()
    make_runs(v2, 3, created_at=since - timedelta(seconds=5), chat=chat)  # the step before: not counted
    for ttft in (100, 200, 300, 400):
        make_runs(v2, 1, ttft_ms=ttft, created_at=since + timedelta(seconds=1), chat=chat)
    make_runs(v2, 1, status=RunStatus.FAILED, created_at=since + timedelta(seconds=1), chat=chat)
    make_runs(v2, 1, status=RunStatus.CANCELLED, ttft_ms=None, created_at=since + timedelta(seconds=1), chat=chat)
    make_runs(v2, 1, status=RunStatus.STREAMING, ttft_ms=1000, created_at=since + timedelta(seconds=1))
    make_runs(v1, 2, ttft_ms=50, created_at=since + timedelta(seconds=1), chat=chat)

    health = rollout_step_health(started, since)

    target = health.target
    assert (target.ended, target.failed, target.cancelled, target.in_flight) == (5, 1, 1, 1)
    assert target.failed_rate == pytest.approx(0.2)
    assert target.with_first_token == 5
    assert target.ttft_p50_ms == pytest.approx(300) and target.ttft_p99_ms == pytest.approx(1000)
    assert health.baseline is not None and health.baseline.key == v1.key
    assert (health.baseline.ended, health.baseline.ttft_p99_ms) == (2, pytest.approx(50))


def test_judge_passes_a_timed_out_step_only_when_nothing_failed(v1: ModelDeployment, chat: Chat) -> None:
    add_version("v2")
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    lenient = RolloutThresholds(max_failed_rate=1.0, min_runs=5, min_ttft_runs=5)
    since = timezone.now()
    make_runs(started.to_deployment, 2, chat=chat)

    ok, verdict = rollout_judge(rollout_step_health(started, since, timed_out=True), lenient)
    assert ok and "step timeout" in verdict and "none failed" in verdict
    ok, verdict = rollout_judge(rollout_step_health(started, since), lenient)
    assert not ok and "not judged yet" in verdict

    make_runs(started.to_deployment, 1, status=RunStatus.FAILED, chat=chat)
    ok, verdict = rollout_judge(rollout_step_health(started, since, timed_out=True), lenient)
    assert not ok and "1 failed" in verdict


def _figures(key: str, runs: int, p99_ms: float) -> VersionFigures:
    return VersionFigures(
        key=key,
        ended=runs,
        failed=0,
        cancelled=0,
        in_flight=0,
        with_first_token=runs,
        ttft_p50_ms=p99_ms / 2,
        ttft_p99_ms=p99_ms,
    )


def test_ttft_p99s_of_a_few_runs_are_not_compared() -> None:
    """The p99 of a handful of runs is their slowest one: noise on a busy host must not roll a rollout back."""
    few = StepHealth(since=timezone.now(), target=_figures("m@v2", 5, 2500.0), baseline=_figures("m@v1", 5, 400.0))
    ok, reason = rollout_judge(few, RolloutThresholds(min_runs=5))  # min_ttft_runs: 20 by default
    assert ok and "TTFT not compared" in reason
    ok, reason = rollout_judge(few, RolloutThresholds(min_runs=5, min_ttft_runs=5))
    assert not ok and "TTFT p99 ratio 6.25" in reason
