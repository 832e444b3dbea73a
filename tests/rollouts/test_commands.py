"""The rollout and retire commands: what they print and how they exit."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from chats.models import Chat
from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus
from rollouts.services import (
    RolloutConflict,
    rollout_apply_step,
    rollout_start,
)
from runs.models import RunStatus
from tests.deployment_helpers import add_version
from tests.rollouts.helpers import FAST, make_runs, weights

pytestmark = pytest.mark.django_db


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
    rollout_apply_step(started, 25)  # then the command was killed (SIGKILL): the rollout stays running
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
