"""What the rollout tests share: runs on a version, the weights read back, and a fake clock for whole rollouts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from chats.models import Chat
from deployments.models import ModelDeployment, Rollout
from rollouts.health import RolloutThresholds
from rollouts.services import (
    rollout_execute,
)
from runs.models import ACTIVE_STATUSES, Run, RunStatus
from tests.factories import ChatFactory, RunFactory

FAST = RolloutThresholds(step_wait_s=30.0, step_timeout_s=120.0, min_runs=5, min_ttft_runs=5)


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
        active = status in ACTIVE_STATUSES
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
    return rollout_execute(
        name=name,
        to_version=version,
        thresholds=thresholds,
        clock=fake.clock,
        sleep=fake.sleep,
        report=(lines if lines is not None else []).append,
        poll_s=30.0,
    )
