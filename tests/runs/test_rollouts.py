"""Red-black rollouts (steps, health check, atomic rollback), draining and retiring idle versions."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from chats.models import Chat
from core.redis_client import get_redis
from core.worker_contract import WorkerHeartbeat, WorkerState, write_heartbeat
from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus
from deployments.registry import resolve_model
from runs.models import Run, RunStatus
from runs.rollouts import (
    RolloutConflict,
    RolloutRefused,
    RolloutThresholds,
    StepHealth,
    VersionFigures,
    apply_step,
    drain_status,
    judge,
    retire_idle_deployments,
    rollback,
    rollout_start,
    run_rollout,
    step_health,
)
from tests.deployment_helpers import add_version, no_ready_worker
from tests.factories import ChatFactory, RunFactory

pytestmark = pytest.mark.django_db

FAST = RolloutThresholds(step_wait_s=30.0, step_timeout_s=120.0, min_runs=5, min_ttft_runs=5)


@pytest.fixture
def v1() -> ModelDeployment:
    return ModelDeployment.objects.get(is_default=True)


@pytest.fixture
def chat() -> Chat:
    return ChatFactory.create()


def make_runs(
    deployment: ModelDeployment,
    n: int,
    *,
    status: str = RunStatus.DONE,
    ttft_ms: float | None = 100.0,
    created_at: datetime | None = None,
    chat: Chat | None = None,
) -> None:
    """``n`` runs on ``deployment``: created at ``created_at`` (now by default), first token ``ttft_ms`` later
    (failed runs: none). Runs in flight each get their own chat (one active run per chat)."""
    terminal_chat = chat or ChatFactory.create()
    for _ in range(n):
        active = status in (RunStatus.QUEUED, RunStatus.STREAMING, RunStatus.CANCELLING)
        run = RunFactory.create(
            chat=ChatFactory.create() if active else terminal_chat, deployment=deployment, status=status
        )
        created = created_at or run.created_at
        first = None if status == RunStatus.FAILED or ttft_ms is None else created + timedelta(milliseconds=ttft_ms)
        Run.objects.filter(pk=run.pk).update(created_at=created, first_token_at=first)


def snapshot() -> tuple[int, list[tuple[Any, ...]]]:
    rows = ModelDeployment.objects.order_by("id").values_list("id", "status", "traffic_weight", "is_default")
    return Rollout.objects.count(), list(rows)


def weights(*rows: ModelDeployment) -> list[int]:
    return [ModelDeployment.objects.get(pk=row.pk).traffic_weight for row in rows]


class FakeTime:
    """An injected clock: ``sleep`` advances it and then calls ``on_sleep`` (which fabricates the step's runs)."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


def rollout(
    name: str, version: str, fake: FakeTime, thresholds: RolloutThresholds = FAST, lines: list[str] | None = None
) -> Rollout:
    return run_rollout(
        name=name,
        to_version=version,
        thresholds=thresholds,
        clock=fake.clock,
        sleep=fake.sleep,
        report=(lines if lines is not None else []).append,
        poll_s=30.0,
    )


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

    stepped = apply_step(started, 25)

    assert weights(v1, v1b, v2) == [45, 30, 25]
    assert [(h["step"], h["weight"]) for h in stepped.history] == [(1, 25)]
    apply_step(stepped, 33)
    assert weights(v1, v1b, v2) == [40, 27, 33]  # 40.2 and 26.8: largest remainder, summing to 100


def test_rollback_restores_every_weight_and_leaves_the_target_ready(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    v3 = add_version("v3", weight=0)
    before = snapshot()
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    apply_step(apply_step(started, 10), 50)
    assert weights(v1, v2) == [50, 50]

    done = rollback(started, "operator said so")

    assert done.status == RolloutStatus.ROLLED_BACK and done.reason == "operator said so"
    assert done.finished_at is not None
    assert snapshot()[1] == before[1]
    assert ModelDeployment.objects.get(pk=v2.pk).status == DeploymentStatus.READY
    assert weights(v3) == [0]
    with pytest.raises(RolloutConflict, match="no longer running"):
        apply_step(started, 100)


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

    health = step_health(started, since)

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

    ok, verdict = judge(step_health(started, since, timed_out=True), lenient)
    assert ok and "step timeout" in verdict and "none failed" in verdict
    ok, verdict = judge(step_health(started, since), lenient)
    assert not ok and "not judged yet" in verdict

    make_runs(started.to_deployment, 1, status=RunStatus.FAILED, chat=chat)
    ok, verdict = judge(step_health(started, since, timed_out=True), lenient)
    assert not ok and "1 failed" in verdict


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
    assert resolve_model(v1.name).key == v2.key  # the registry was told (forget_cached)
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


# -- draining and retiring -----------------------------------------------------------------------------------


def test_drain_status_counts_runs_in_flight_and_workers_by_state(v1: ModelDeployment, chat: Chat) -> None:
    make_runs(v1, 2, status=RunStatus.STREAMING)
    make_runs(v1, 1, chat=chat)
    for worker, state in (("w1", WorkerState.DRAINING), ("w2", WorkerState.DRAINED), ("w3", WorkerState.DRAINED)):
        beat = WorkerHeartbeat(
            worker=worker,
            model=v1.name,
            model_version=v1.version,
            max_slots=4,
            running=0,
            waiting=0,
            kv_cache_usage=0.0,
            tpot_s=None,
            active_runs=0,
            updated_at=time.time(),
            deployment=v1.key,
            state=state,
        )
        write_heartbeat(beat, ttl_s=60, client=get_redis())

    assert drain_status(v1) == (2, {"draining": 1, "drained": 2})


def test_retire_keeps_the_newest_the_default_and_the_busy(v1: ModelDeployment, chat: Chat) -> None:
    now = timezone.now()
    long_ago = now - timedelta(days=3)
    v2 = add_version("v2", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # idle: retired
    v3 = add_version("v3", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # a run in flight: kept
    v4 = add_version("v4", weight=0)  # ready, no traffic, idle: retired
    v5 = add_version("v5", status=DeploymentStatus.DRAINING, drained_at=long_ago)  # a recent run: kept
    v6 = add_version("v6", status=DeploymentStatus.DRAINING, drained_at=now - timedelta(minutes=5))  # just drained
    v7 = add_version("v7", weight=0)  # the newest: kept
    for age, row in enumerate([v1, v2, v3, v4, v5, v6, v7]):
        ModelDeployment.objects.filter(pk=row.pk).update(created_at=long_ago - timedelta(hours=10 - age))
    ModelDeployment.objects.filter(pk=v1.pk).update(traffic_weight=0)  # the default, even without traffic
    make_runs(v2, 3, created_at=long_ago, chat=chat)
    make_runs(v3, 1, status=RunStatus.STREAMING, created_at=long_ago)
    make_runs(v5, 1, created_at=now - timedelta(minutes=1), chat=chat)

    retired = retire_idle_deployments(idle_s=3600, now=now)

    assert sorted(row.version for row in retired) == ["v2", "v4"]
    status = dict(ModelDeployment.objects.values_list("version", "status"))
    assert status == {
        "v1": DeploymentStatus.READY,
        "v2": DeploymentStatus.RETIRED,
        "v3": DeploymentStatus.DRAINING,
        "v4": DeploymentStatus.RETIRED,
        "v5": DeploymentStatus.DRAINING,
        "v6": DeploymentStatus.DRAINING,
        "v7": DeploymentStatus.READY,
    }
    gone = ModelDeployment.objects.get(pk=v2.pk)
    assert gone.retired_at == now and gone.traffic_weight == 0
    assert retire_idle_deployments(idle_s=3600, now=now) == []


def test_retire_leaves_a_running_rollouts_versions_alone(v1: ModelDeployment) -> None:
    long_ago = timezone.now() - timedelta(days=3)
    v2 = add_version("v2")
    add_version("v3", weight=0)
    ModelDeployment.objects.filter(pk=v2.pk).update(created_at=long_ago)
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)

    assert retire_idle_deployments(idle_s=60) == []

    rollback(started, "not now")
    assert [row.version for row in retire_idle_deployments(idle_s=60)] == ["v2"]


# -- the commands --------------------------------------------------------------------------------------------


def test_rollout_command_prints_each_step_and_succeeds(v1: ModelDeployment) -> None:
    add_version("v2")
    out = io.StringIO()
    call_command("deployment_rollout", v1.name, "--to", "v2", "--step-wait", "0", "--step-timeout", "0", stdout=out)
    text = out.getvalue()
    for number, weight in enumerate((10, 25, 50, 100), start=1):
        assert f"step {number} ({weight}%): pass: passed on the step timeout" in text
    assert f"{v1.name}@v2: 0 ended" in text and "succeeded" in text
    assert Rollout.objects.get().status == RolloutStatus.SUCCEEDED


def test_rollout_command_exits_1_on_refusal(v1: ModelDeployment) -> None:
    with pytest.raises(CommandError, match="Refused: There is no deployment") as refused:
        call_command("deployment_rollout", v1.name, "--to", "v9", stdout=io.StringIO())
    assert refused.value.returncode == 1
    with pytest.raises(CommandError, match="whole percentages"):
        call_command("deployment_rollout", v1.name, "--to", "v9", "--steps", "10,x", stdout=io.StringIO())
    assert Rollout.objects.count() == 0


def test_rollout_command_exits_1_on_rollback(v1: ModelDeployment, chat: Chat) -> None:
    v2 = add_version("v2")
    # Dated ahead, so every step's window holds them.
    make_runs(v2, 4, status=RunStatus.FAILED, created_at=timezone.now() + timedelta(hours=1), chat=chat)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"Rolled back: step 1 \(50%\): failed rate 100.0%") as rolled:
        call_command(
            "deployment_rollout", v1.name, "--to", "v2", "--steps", "50,100", "--step-timeout", "0",
            "--step-wait", "0", "--min-runs", "3", stdout=out,
        )  # fmt: skip
    assert rolled.value.returncode == 1
    assert "step 1 (50%): FAIL" in out.getvalue()
    assert weights(v1, v2) == [100, 0]


def test_abort_rolls_back_a_rollout_whose_command_died(v1: ModelDeployment) -> None:
    v2 = add_version("v2")
    started = rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    apply_step(started, 25)  # then the command was killed (SIGKILL): the rollout stays running
    with pytest.raises(RolloutConflict):
        rollout_start(name=v1.name, to_version="v2", thresholds=FAST)
    out = io.StringIO()
    call_command("deployment_rollout", v1.name, "--abort", stdout=out)
    assert "rolled back" in out.getvalue() and weights(v1, v2) == [100, 0]
    aborted = Rollout.objects.get(pk=started.pk)
    assert aborted.status == RolloutStatus.FAILED and "aborted by the operator" in aborted.reason
    with pytest.raises(CommandError, match="No rollout of"):
        call_command("deployment_rollout", v1.name, "--abort", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--to VERSION"):
        call_command("deployment_rollout", v1.name, stdout=io.StringIO())


def test_retire_command_prints_what_it_retired(v1: ModelDeployment) -> None:
    v2 = add_version("v2", status=DeploymentStatus.DRAINING, drained_at=timezone.now() - timedelta(days=2))
    add_version("v3", weight=0)
    ModelDeployment.objects.filter(pk=v2.pk).update(created_at=timezone.now() - timedelta(days=2))
    out = io.StringIO()
    call_command("retire_deployments", "--idle-s", "3600", stdout=out)
    assert f"retired {v2.key}: Retired: idle since" in out.getvalue()
    out = io.StringIO()
    call_command("retire_deployments", "--idle-s", "3600", stdout=out)
    assert out.getvalue().strip() == "nothing to retire"


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
    ok, reason = judge(few, RolloutThresholds(min_runs=5))  # min_ttft_runs: 20 by default
    assert ok and "TTFT not compared" in reason
    ok, reason = judge(few, RolloutThresholds(min_runs=5, min_ttft_runs=5))
    assert not ok and "TTFT p99 ratio 6.25" in reason
