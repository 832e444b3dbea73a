"""The health check of a rollout's step: the figures of the target's runs against the old version's, and the verdict.

A step passes unless the target's failed rate is above ``max_failed_rate``, or its TTFT p99 is more than
``max_ttft_p99_ratio`` times the old version's (compared only when both have ``min_ttft_runs`` runs with a first
token), or (a feedback-gated step: ``max_negative_feedback_delta`` set) the share of ``down`` ratings of its
answers is more than that margin above the old version's (compared only when both have ``min_feedback_ratings``
ratings), and once ``min_runs`` runs ended on it (or the step timed out with none failed). The figures come from the
Run rows of the step's window, in one query, and the ratings of those runs (``feedback``), in another.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from deployments.models import Rollout
from feedback.selectors import FeedbackTally, feedback_of_runs_since
from runs.models import ACTIVE_STATUSES, Run, RunStatus

NO_RATINGS = FeedbackTally(up=0, down=0)


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
    max_negative_feedback_delta: float | None = None
    """Feedback-gated steps: a step fails when the share of ``down`` ratings of the target's answers (of the step's
    runs) is more than this above the old version's, e.g. 0.1 = ten points; None: feedback is not checked."""
    min_feedback_ratings: int = 20
    """Ratings each version needs in a step before their negative shares are compared (a gated step waits for them
    until ``step_timeout_s``, and then passes saying it could not compare)."""
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
        if self.min_runs < 1 or self.min_ttft_runs < 1 or self.min_feedback_ratings < 1:
            found.append("min_runs, min_ttft_runs and min_feedback_ratings must be at least 1")
        if self.max_negative_feedback_delta is not None and not 0.0 <= self.max_negative_feedback_delta <= 1.0:
            found.append("max_negative_feedback_delta must be between 0 and 1")
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
    target_feedback: FeedbackTally = NO_RATINGS
    """Ratings of the target's answers to the step's runs."""
    baseline_feedback: FeedbackTally = NO_RATINGS

    def feedback_comparable(self, thresholds: RolloutThresholds) -> bool:
        """Both versions have ``min_feedback_ratings`` ratings in the step."""
        need = thresholds.min_feedback_ratings
        return (
            self.baseline is not None
            and self.target_feedback.ratings >= need
            and self.baseline_feedback.ratings >= need
        )

    def to_json(self) -> dict[str, Any]:
        def tally(t: FeedbackTally) -> dict[str, Any]:
            rate = t.negative_rate
            return {"up": t.up, "down": t.down, "negative_rate": round(rate, 4) if rate is not None else None}

        return {
            "since": self.since.isoformat(),
            "target": {**self.target.to_json(), "feedback": tally(self.target_feedback)},
            "baseline": (
                {**self.baseline.to_json(), "feedback": tally(self.baseline_feedback)}
                if self.baseline is not None
                else None
            ),
            "timed_out": self.timed_out,
        }

    def describe(self) -> str:
        def ratings(t: FeedbackTally) -> str:
            return f", {t.ratings} ratings ({t.down} down)" if t.ratings else ""

        target = self.target.describe() + ratings(self.target_feedback)
        if self.baseline is None:
            return target
        return f"{target} | {self.baseline.describe()}{ratings(self.baseline_feedback)}"


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
    from their Run rows: ended, failed, in flight, and TTFT (``first_token_at - created_at``) p50/p99 in ms (one
    query), and the ratings of those runs' answers (one more)."""
    target, baseline = rollout.to_deployment, rollout.from_deployment
    ids = [target.pk] + ([baseline.pk] if baseline is not None else [])
    rows: dict[int, list[tuple[str, datetime, datetime | None]]] = {pk: [] for pk in ids}
    for deployment_id, status, created, first in Run.objects.filter(
        deployment_id__in=ids, created_at__gte=since
    ).values_list("deployment_id", "status", "created_at", "first_token_at"):
        rows[deployment_id].append((status, created, first))
    feedback = feedback_of_runs_since(deployment_ids=ids, since=since)
    return StepHealth(
        since=since,
        target=_figures(target.key, rows[target.pk]),
        baseline=_figures(baseline.key, rows[baseline.pk]) if baseline is not None else None,
        timed_out=timed_out,
        target_feedback=feedback.get(target.pk, NO_RATINGS),
        baseline_feedback=feedback.get(baseline.pk, NO_RATINGS) if baseline is not None else NO_RATINGS,
    )


def _feedback_verdict(health: StepHealth, thresholds: RolloutThresholds) -> tuple[bool, str]:
    """The feedback gate of a step (True, with a note for the verdict, when it is not gated or passes)."""
    margin = thresholds.max_negative_feedback_delta
    if margin is None:
        return True, ""
    target, baseline = health.target_feedback, health.baseline_feedback
    if not health.feedback_comparable(thresholds):
        return True, (
            f", feedback not compared ({target.ratings} and {baseline.ratings} ratings, "
            f"{thresholds.min_feedback_ratings} needed on each side)"
        )
    t_rate, b_rate = target.negative_rate or 0.0, baseline.negative_rate or 0.0
    delta = t_rate - b_rate
    figures = (
        f"negative feedback {t_rate:.1%} ({target.down} of {target.ratings} ratings on {health.target.key}) vs "
        f"{b_rate:.1%} ({baseline.down} of {baseline.ratings})"
    )
    if delta > margin:
        return False, f"{figures}: {delta:+.1%}, worse than the margin of {margin:.1%}"
    return True, f", {figures} within the margin of {margin:.1%}"


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
    feedback_ok, feedback = _feedback_verdict(health, thresholds)
    if not feedback_ok:
        return False, feedback
    ttft += feedback
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
