"""The health check of a rollout's step: the figures of the target's runs against the old version's, and the verdict.

A step passes unless the target's failed rate is above ``max_failed_rate``, or its TTFT p99 is more than
``max_ttft_p99_ratio`` times the old version's (compared only when both have ``min_ttft_runs`` runs with a first
token), and once ``min_runs`` runs ended on it (or the step timed out with none failed). The figures come from the
Run rows of the step's window, in one query.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from deployments.models import Rollout
from runs.models import ACTIVE_STATUSES, Run, RunStatus


@dataclass(frozen=True)
class RolloutThresholds:
    """The health check's limits, recorded on the rollout (``Rollout.thresholds``)."""

    max_failed_rate: float = 0.05
    """A step fails when more than this share of the target's runs that ended in it failed (cancelled runs are
    the users' choice and are not counted)."""
    max_ttft_p99_ratio: float = 2.0
    """A step fails when the target's TTFT p99 is more than this many times the old version's over the same window;
    judged only when both have at least ``min_ttft_runs`` runs with a first token in it."""
    min_runs: int = 5
    """Runs that must end (done or failed) on the target during a step before it is judged."""
    min_ttft_runs: int = 20
    """Runs with a first token each version needs in a step before their TTFT p99 are compared: the p99 of fewer
    is about their slowest run, and one slow first token on a busy host must not roll a rollout back (the rollout
    benchmark's quick run did, at 3 runs a side)."""
    step_wait_s: float = 30.0
    """The least time a step holds, however many runs end sooner."""
    step_timeout_s: float = 600.0
    """A step that has not seen ``min_runs`` runs end after this long is judged on what it saw: it passes only if
    none of its runs failed (zero runs included: no traffic is no evidence against the target), and its verdict says
    so."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RolloutThresholds:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def problems(self) -> list[str]:
        found = []
        if not 0.0 <= self.max_failed_rate <= 1.0:
            found.append("max_failed_rate must be between 0 and 1")
        if self.max_ttft_p99_ratio <= 0:
            found.append("max_ttft_p99_ratio must be above 0")
        if self.min_runs < 1 or self.min_ttft_runs < 1:
            found.append("min_runs and min_ttft_runs must be at least 1")
        if self.step_wait_s < 0 or self.step_timeout_s < self.step_wait_s:
            found.append("step_wait_s must be at least 0 and step_timeout_s at least step_wait_s")
        return found


@dataclass(frozen=True)
class VersionFigures:
    """One version's runs created since a step began."""

    key: str
    ended: int
    """Done or failed (cancelled runs are counted apart)."""
    failed: int
    cancelled: int
    in_flight: int
    with_first_token: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None

    @property
    def failed_rate(self) -> float:
        return self.failed / self.ended if self.ended else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "failed_rate": round(self.failed_rate, 4)}

    def describe(self) -> str:
        ttft = (
            f"TTFT p50 {self.ttft_p50_ms:.0f} ms p99 {self.ttft_p99_ms:.0f} ms"
            if self.ttft_p50_ms is not None and self.ttft_p99_ms is not None
            else "no TTFT yet"
        )
        return (
            f"{self.key}: {self.ended} ended, {self.failed} failed ({self.failed_rate:.1%}), "
            f"{self.in_flight} in flight, {ttft}"
        )


@dataclass(frozen=True)
class StepHealth:
    """What the health check sees of one step: the target's runs and the old version's, over the same window."""

    since: datetime
    target: VersionFigures
    baseline: VersionFigures | None
    timed_out: bool = False
    """The step ran out of ``step_timeout_s`` before ``min_runs`` runs ended on the target."""

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "target": self.target.to_json(),
            "baseline": self.baseline.to_json() if self.baseline is not None else None,
            "timed_out": self.timed_out,
        }

    def describe(self) -> str:
        return self.target.describe() + (f" | {self.baseline.describe()}" if self.baseline is not None else "")


def _percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..1) of values sorted ascending; None when there are none."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)]


def _figures(key: str, rows: list[tuple[str, datetime, datetime | None]]) -> VersionFigures:
    statuses = Counter(status for status, _, _ in rows)
    ttfts = sorted((first - created).total_seconds() * 1000.0 for _, created, first in rows if first is not None)
    return VersionFigures(
        key=key,
        ended=statuses[RunStatus.DONE] + statuses[RunStatus.FAILED],
        failed=statuses[RunStatus.FAILED],
        cancelled=statuses[RunStatus.CANCELLED],
        in_flight=sum(statuses[s] for s in ACTIVE_STATUSES),
        with_first_token=len(ttfts),
        ttft_p50_ms=_percentile(ttfts, 0.50),
        ttft_p99_ms=_percentile(ttfts, 0.99),
    )


def rollout_step_health(rollout: Rollout, since: datetime, *, timed_out: bool = False) -> StepHealth:
    """Figures of the runs created since ``since`` on the target and on the old version (``from_deployment``),
    from their Run rows: ended, failed, in flight, and TTFT (``first_token_at - created_at``) p50/p99 in ms. One
    query."""
    target, baseline = rollout.to_deployment, rollout.from_deployment
    ids = [target.pk] + ([baseline.pk] if baseline is not None else [])
    rows: dict[int, list[tuple[str, datetime, datetime | None]]] = {pk: [] for pk in ids}
    for deployment_id, status, created, first in Run.objects.filter(
        deployment_id__in=ids, created_at__gte=since
    ).values_list("deployment_id", "status", "created_at", "first_token_at"):
        rows[deployment_id].append((status, created, first))
    return StepHealth(
        since=since,
        target=_figures(target.key, rows[target.pk]),
        baseline=_figures(baseline.key, rows[baseline.pk]) if baseline is not None else None,
        timed_out=timed_out,
    )


def rollout_judge(health: StepHealth, thresholds: RolloutThresholds) -> tuple[bool, str]:
    """Whether the step passes, and why, in words for the operator (the rollback's reason when it does not)."""
    target, baseline = health.target, health.baseline
    if target.ended and target.failed_rate > thresholds.max_failed_rate:
        return False, (
            f"failed rate {target.failed_rate:.1%} ({target.failed} of {target.ended} runs on {target.key}) is above "
            f"the limit of {thresholds.max_failed_rate:.1%}"
        )
    if (
        baseline is not None
        and target.with_first_token >= thresholds.min_ttft_runs
        and baseline.with_first_token >= thresholds.min_ttft_runs
        and target.ttft_p99_ms is not None
        and baseline.ttft_p99_ms
    ):
        ratio = target.ttft_p99_ms / baseline.ttft_p99_ms
        if ratio > thresholds.max_ttft_p99_ratio:
            return False, (
                f"TTFT p99 ratio {ratio:.2f} ({target.key} {target.ttft_p99_ms:.0f} ms vs {baseline.key} "
                f"{baseline.ttft_p99_ms:.0f} ms) is above the limit of {thresholds.max_ttft_p99_ratio:.2f}"
            )
        ttft = f", TTFT p99 ratio {ratio:.2f} within {thresholds.max_ttft_p99_ratio:.2f}"
    else:
        ttft = ", TTFT not compared (too few runs with a first token)"
    if target.ended < thresholds.min_runs:
        if not health.timed_out:
            return False, f"only {target.ended} of {thresholds.min_runs} runs ended on {target.key}: not judged yet"
        if target.failed:
            return False, (
                f"only {target.ended} of {thresholds.min_runs} runs ended before the step timeout and "
                f"{target.failed} failed"
            )
        return True, (
            f"passed on the step timeout: only {target.ended} of {thresholds.min_runs} runs ended, none failed{ttft}"
        )
    return True, f"failed rate {target.failed_rate:.1%} within {thresholds.max_failed_rate:.1%}{ttft}"
