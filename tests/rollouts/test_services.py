"""Red-black rollouts: refusals, weights moved and restored, and whole rollouts with a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from chats.models import Chat
from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus
from deployments.selection import resolve_model
from rollouts.services import (
    RolloutConflict,
    RolloutRefused,
    rollout_apply_step,
    rollout_rollback,
    rollout_start,
)
from runs.models import RunStatus
from tests.deployment_helpers import add_version, no_ready_worker
from tests.rollouts.helpers import FAST, FakeTime, make_runs, rollout, snapshot, weights

pytestmark = pytest.mark.django_db


# -- refusals ----------------------------------------------------------------------------------------------


def test_unknown_version_is_refused_and_nothing_is_written(v1: ModelDeployment) -> None:
    before = snapshot()
    with pytest.raises(RolloutRefused, match="no deployment") as refused:
        rollout_start(name=v1.name, to_version="v9", thresholds=FAST)
    assert refused.value.status_code == 400
    assert snapshot() == before


def test_target_not_ready_is_refused(v1: ModelDeployment) -> None:
    add_version("v2", status=DeploymentStatus.MATERIALIZING)
    before = snapshot()
    with pytest.raises(RolloutRefused, match="materializing"):
        rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    assert snapshot() == before


def test_target_without_a_ready_worker_is_refused(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    no_ready_worker(v2.key)
    before = snapshot()
    with pytest.raises(RolloutRefused, match="no ready worker"):
        rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    assert snapshot() == before


def test_a_second_rollout_of_the_name_is_a_conflict(v1: ModelDeployment) -> None:
    add_version("v2")
    add_version("v3")
    first = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    before = snapshot()
    with pytest.raises(RolloutConflict, match="already running") as refused:
        rollout_start(name=v1.name, to_version="v3", thresholds=FAST)
    assert refused.value.status_code == 409
    assert snapshot() == before
    assert list(Rollout.objects.values_list("id", flat=True)) == [first.pk]


@pytest.mark.parametrize(
    "steps", [(), (10, 5, 100), (10, 50), (0, 100), (10, 10, 100), (50, 150), (10.5, 100), (True, 100)]
)
def test_bad_steps_are_refused(v1: ModelDeployment, steps: tuple[Any, ...]) -> None:
    add_version("v2")
    before = snapshot()
    with pytest.raises(RolloutRefused, match="strictly increasing"):
        rollout_start(name=v1.name, to_version="v2", steps=steps, thresholds=FAST)
    assert snapshot() == before


def test_a_target_that_has_all_the_traffic_is_refused(v1: ModelDeployment) -> None:
    add_version("v2", weight=100)
    ModelDeployment.objects.filter(pk=v1.pk).update(traffic_weight=0)
    before = snapshot()
    with pytest.raises(RolloutRefused, match="already has all"):
        rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    assert snapshot() == before


def test_start_records_the_previous_weights_and_the_source(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    v0 = add_version("v0", status=DeploymentStatus.DRAINING, weight=0)
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    assert started.status == RolloutStatus.RUNNING
    assert started.from_deployment_id == v1.pk and started.to_deployment_id == v2.pk
    assert started.previous_weights == {str(v1.pk): 100, str(v2.pk): 0, str(v0.pk): 0}
    assert started.steps == [10, 25, 50, 100]
    assert started.thresholds["min_runs"] == 5


# -- weights -------------------------------------------------------------------------------------------------


def test_a_step_splits_the_rest_over_the_previous_versions_in_proportion(v1: ModelDeployment) -> None:
    ModelDeployment.objects.filter(pk=v1.pk).update(traffic_weight=60)
    v1b = add_version("v1b", weight=40)
    v2 = add_version("v2")
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)

    stepped = rollout_apply_step(started, 25)

    assert weights(v1, v1b, v2) == [45, 30, 25]
    assert [(h["step"], h["weight"]) for h in stepped.history] == [(1, 25)]
    rollout_apply_step(stepped, 33)
    assert weights(v1, v1b, v2) == [40, 27, 33]  # 40.2 and 26.8: largest remainder, summing to 100


def test_rollback_restores_every_weight_and_leaves_the_target_ready(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    v3 = add_version("v3", weight=0)
    before = snapshot()
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    rollout_apply_step(rollout_apply_step(started, 10), 50)
    assert weights(v1, v2) == [50, 50]

    done = rollout_rollback(started, "operator said so")

    assert done.status == RolloutStatus.ROLLED_BACK and done.reason == "operator said so"
    assert done.finished_at is not None
    assert snapshot()[1] == before[1]
    assert ModelDeployment.objects.get(pk=v2.pk).status == DeploymentStatus.READY
    assert weights(v3) == [0]
    with pytest.raises(RolloutConflict, match="no longer running"):
        rollout_apply_step(started, 100)


# -- whole rollouts ------------------------------------------------------------------------------------------


def test_a_healthy_rollout_moves_all_the_traffic_and_drains_the_old_version(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")
    seen: list[list[int]] = []

    def traffic(_: int) -> None:
        seen.append(weights(v1, v2))
        make_runs(v2, 5, ttft_ms=120, chat=chat)
        make_runs(v1, 5, ttft_ms=100, chat=chat)

    lines: list[str] = []
    fake = FakeTime(traffic)
    done = rollout(v1.name, "v2", fake, lines=lines)

    assert done.status == RolloutStatus.SUCCEEDED and done.finished_at is not None
    assert seen == [[90, 10], [75, 25], [50, 50], [0, 100]]
    assert [h["weight"] for h in done.history] == [10, 25, 50, 100]
    assert all(h["ok"] and h["health"]["target"]["ended"] == 5 for h in done.history)
    assert fake.now == pytest.approx(4 * FAST.step_wait_s)
    old, new = ModelDeployment.objects.get(pk=v1.pk), ModelDeployment.objects.get(pk=v2.pk)
    assert (old.status, old.traffic_weight, old.is_default) == (DeploymentStatus.DRAINING, 0, False)
    assert old.drained_at is not None
    assert (new.status, new.traffic_weight, new.is_default) == (DeploymentStatus.READY, 100, True)
    assert resolve_model(v1.name).key == v2.key  # the selection snapshot was told (forget_cached)
    assert any("step 4 (100%): pass" in line for line in lines)
    assert lines[-1].startswith("succeeded")


def test_a_failing_target_is_rolled_back_atomically(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")
    v3 = add_version("v3", weight=0)
    before = snapshot()

    def traffic(step: int) -> None:
        if step == 1:
            make_runs(v2, 5, chat=chat)
        else:
            make_runs(v2, 2, chat=chat)
            make_runs(v2, 3, status=RunStatus.FAILED, chat=chat)
        make_runs(v1, 5, chat=chat)

    done = rollout(v1.name, "v2", FakeTime(traffic))

    assert done.status == RolloutStatus.ROLLED_BACK
    assert "failed rate 60.0%" in done.reason and "step 2 (25%)" in done.reason
    assert snapshot()[1] == before[1]  # weights, statuses and the default exactly as before
    assert weights(v1, v2, v3) == [100, 0, 0]
    assert [h["ok"] for h in done.history] == [True, False]


def test_a_slow_target_is_rolled_back_on_the_ttft_ratio(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")

    def traffic(_: int) -> None:
        make_runs(v2, 5, ttft_ms=900, chat=chat)
        make_runs(v1, 5, ttft_ms=100, chat=chat)

    done = rollout(v1.name, "v2", FakeTime(traffic))

    assert done.status == RolloutStatus.ROLLED_BACK
    assert "TTFT p99 ratio 9.00" in done.reason and "step 1 (10%)" in done.reason
    assert weights(v1, v2) == [100, 0]


def test_steps_without_traffic_pass_on_their_timeout(v1: ModelDeployment) -> None:
    add_version("v2")
    fake = FakeTime()
    done = rollout(v1.name, "v2", fake)
    assert done.status == RolloutStatus.SUCCEEDED
    assert all("step timeout" in h["verdict"] for h in done.history)
    assert fake.now == pytest.approx(4 * FAST.step_timeout_s)


def test_an_error_mid_rollout_rolls_back_as_failed_and_is_raised(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")
    before = snapshot()

    def traffic(step: int) -> None:
        if step == 2:
            raise KeyboardInterrupt
        make_runs(v2, 5, chat=chat)

    with pytest.raises(KeyboardInterrupt):
        rollout(v1.name, "v2", FakeTime(traffic))

    failed = Rollout.objects.get()
    assert failed.status == RolloutStatus.FAILED and "KeyboardInterrupt" in failed.reason
    assert snapshot()[1] == before[1]


def test_a_target_that_stops_being_ready_fails_the_rollout(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")

    def traffic(step: int) -> None:
        make_runs(v2, 5, chat=chat)
        if step == 1:
            ModelDeployment.objects.filter(pk=v2.pk).update(status=DeploymentStatus.FAILED)

    with pytest.raises(RolloutRefused, match="can no longer take traffic"):
        rollout(v1.name, "v2", FakeTime(traffic))

    failed = Rollout.objects.get()
    assert failed.status == RolloutStatus.FAILED and "can no longer take traffic" in failed.reason
    assert weights(v1, v2) == [100, 0]
