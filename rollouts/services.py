"""Red-black rollouts between versions of a model name, draining, and retiring idle versions.

A rollout moves a name's unpinned traffic to another ``ready`` version in steps (``10, 25, 50, 100`` percent by
default). Each step holds for at least ``step_wait_s`` and until ``min_runs`` runs ended on the target, then a health
check compares the target's runs of that step with the old version's: the failed rate, the TTFT p99 ratio, and (a
feedback-gated rollout) the share of ``down`` ratings of their answers (``rollouts.health``). A
failed check rolls every weight back to what it was, in one transaction; the last step passing hands the target all
of the traffic, makes it the default if the old version was, and puts the old ready versions to ``draining`` (they
take no new runs, their runs in flight finish, their workers report ``drained`` once idle).
:func:`rollouts.retirement.retire_idle_deployments` later retires the versions nobody has used for
``DEPLOYMENT_RETIRE_IDLE_S``.

Weights are written to Postgres; each web process re-reads them within ``DEPLOYMENT_CACHE_S``
(:func:`deployments.selection.forget_cached` makes this process re-read at once).

Concurrency: every write here holds ``SELECT ... FOR UPDATE`` locks on the rollout's row and on the name's
deployments (taken in id order), so a step, a rollback and a completion of the same rollout never interleave, and two
``rollout_start`` calls for one name are serialized (the partial unique constraint ``one_running_rollout_per_name``
is the last guard).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import ConflictError, DomainError
from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus, deployment_key
from deployments.selection import forget_cached
from generation.worker_contract import ready_worker_counts
from rollouts.health import RolloutThresholds, StepHealth, rollout_judge, rollout_step_health

DEFAULT_STEPS = (10, 25, 50, 100)


class RolloutRefused(DomainError):
    """A rollout that cannot start or go on as asked (a 400); nothing was written."""

    code = "rollout_refused"


class RolloutConflict(RolloutRefused, ConflictError):
    """Another rollout of the name is running, or this one is no longer running (a 409); nothing was written."""

    code = "rollout_conflict"


# -- starting and moving weights ---------------------------------------------------------------------------


def _locked_versions(name: str) -> list[ModelDeployment]:
    """The name's deployments, locked in id order. Call inside ``transaction.atomic()``."""
    return list(ModelDeployment.objects.select_for_update().filter(name=name).order_by("id"))


def _locked_rollout(rollout: Rollout) -> Rollout:
    """The rollout's row, locked, which must still be running. Call inside ``transaction.atomic()``."""
    locked = (
        Rollout.objects.select_for_update(of=("self",))
        .select_related("from_deployment", "to_deployment")
        .get(pk=rollout.pk)
    )
    if locked.status != RolloutStatus.RUNNING:
        raise RolloutConflict(f"The rollout {locked.pk} of '{locked.name}' is no longer running ({locked.status}).")
    return locked


def _ready_target(locked: Rollout, versions: list[ModelDeployment]) -> ModelDeployment:
    target = next(d for d in versions if d.pk == locked.to_deployment_id)
    if target.status != DeploymentStatus.READY:
        raise RolloutRefused(f"'{target.key}' is {target.status} now: it can no longer take traffic.")
    return target


def _check_steps(steps: Sequence[Any]) -> list[int]:
    values = list(steps)
    valid = (
        bool(values)
        and all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 100 for s in values)
        and all(a < b for a, b in pairwise(values))
        and values[-1] == 100
    )
    if not valid:
        raise RolloutRefused(
            f"Steps {values!r} are not a rollout: give whole percentages between 1 and 100, strictly increasing, "
            "ending at 100 (e.g. 10,25,50,100)."
        )
    return values


def rollout_start(
    *, name: str, to_version: str, steps: Sequence[int] = DEFAULT_STEPS, thresholds: RolloutThresholds
) -> Rollout:
    """A running rollout of ``name`` towards ``name@to_version``; no weight moves yet (:func:`rollout_apply_step` does).

    Refused, with nothing written, unless the target exists, is ``ready`` (materialized and verified) and has a
    ready worker; when another rollout of the name is running (409); for steps that are not strictly increasing
    whole percentages ending at 100; and when no other ready version of the name has traffic to move from.
    ``previous_weights`` records every version's weight; ``from_deployment`` is the ready version with the most.
    """
    step_list = _check_steps(steps)
    if problems := thresholds.problems():
        raise RolloutRefused(f"Thresholds refused: {'; '.join(problems)}.")
    key = deployment_key(name, to_version)
    with transaction.atomic():
        versions = _locked_versions(name)
        target = next((d for d in versions if d.version == to_version), None)
        if target is None:
            known = ", ".join(d.key for d in versions) or "none"
            raise RolloutRefused(f"There is no deployment '{key}' (versions of '{name}': {known}).")
        if target.status != DeploymentStatus.READY:
            raise RolloutRefused(
                f"'{key}' is {target.status}: only a ready version (materialized and verified) can take traffic."
            )
        if ready_worker_counts([key]).get(key, 0) == 0:
            raise RolloutRefused(f"'{key}' has no ready worker: start one (WORKER_DEPLOYMENT={key}) first.")
        running = Rollout.objects.filter(name=name, status=RolloutStatus.RUNNING).first()
        if running is not None:
            raise RolloutConflict(f"A rollout of '{name}' is already running (rollout {running.pk}).")
        sources = [d for d in versions if d.pk != target.pk and d.status == DeploymentStatus.READY]
        source = max(sources, key=lambda d: (d.traffic_weight, d.created_at), default=None)
        if source is None or source.traffic_weight == 0:
            raise RolloutRefused(f"'{key}' already has all of the traffic of '{name}': there is nothing to move.")
        try:
            with transaction.atomic():
                rollout = Rollout.objects.create(
                    name=name,
                    from_deployment=source,
                    to_deployment=target,
                    steps=step_list,
                    thresholds=thresholds.to_json(),
                    previous_weights={str(d.pk): d.traffic_weight for d in versions},
                    status=RolloutStatus.RUNNING,
                )
        except IntegrityError as exc:  # a concurrent start won the race (one_running_rollout_per_name)
            raise RolloutConflict(f"A rollout of '{name}' is already running.") from exc
    return rollout


def _split(total: int, shares: dict[int, int]) -> dict[int, int]:
    """``total`` split over ``shares``' keys in proportion to their values (largest remainder, whole numbers)."""
    whole = sum(shares.values())
    if not shares or whole == 0:
        return dict.fromkeys(shares, 0)
    exact = {k: total * v / whole for k, v in shares.items()}
    parts = {k: math.floor(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: (parts[k] - exact[k], k))[: total - sum(parts.values())]:
        parts[k] += 1
    return parts


def _set_weights(rows: Iterable[ModelDeployment], weights: dict[int, int]) -> None:
    for row in rows:
        if row.pk in weights and row.traffic_weight != weights[row.pk]:
            row.traffic_weight = weights[row.pk]
            row.save(update_fields=["traffic_weight", "updated_at"])


def rollout_apply_step(rollout: Rollout, weight: int) -> Rollout:
    """The target gets ``weight`` percent; the rest goes to the versions that had traffic before the rollout, in
    proportion to their previous weights. One transaction (the rollout and the name's deployments locked); the step
    is appended to ``history``. :class:`RolloutConflict` when the rollout is no longer running,
    :class:`RolloutRefused` when the target is no longer ready."""
    if not 0 <= weight <= 100:
        raise RolloutRefused(f"A step's weight is a percentage (0-100), not {weight}.")
    with transaction.atomic():
        locked = _locked_rollout(rollout)
        versions = _locked_versions(locked.name)
        _ready_target(locked, versions)
        previous = {int(k): int(v) for k, v in locked.previous_weights.items()}
        others = {d.pk: previous[d.pk] for d in versions if d.pk != locked.to_deployment_id and previous.get(d.pk)}
        _set_weights(versions, {locked.to_deployment_id: weight, **_split(100 - weight, others)})
        locked.history = [
            *locked.history,
            {"step": len(locked.history) + 1, "weight": weight, "started_at": timezone.now().isoformat()},
        ]
        locked.save(update_fields=["history"])
    forget_cached()
    return locked


def _finish(locked: Rollout, *, status: str, reason: str = "") -> None:
    locked.status = status
    locked.reason = reason
    locked.finished_at = timezone.now()
    locked.save(update_fields=["status", "reason", "finished_at"])


def rollout_rollback(rollout: Rollout, reason: str, *, status: str = RolloutStatus.ROLLED_BACK) -> Rollout:
    """Every version of the name gets its weight from before the rollout back, and the rollout ends ``status``
    (``rolled_back``; ``failed`` when the rollout itself broke) with ``reason``; one transaction. The target stays
    ``ready``: its runs in flight finish. ``is_default`` is as it was: only :func:`rollout_complete` moves it, in the
    transaction that ends the rollout, so a running rollout has never moved it. :class:`RolloutConflict` when
    the rollout is no longer running."""
    with transaction.atomic():
        locked = _locked_rollout(rollout)
        versions = _locked_versions(locked.name)
        _set_weights(versions, {int(k): int(v) for k, v in locked.previous_weights.items()})
        _finish(locked, status=status, reason=reason)
    forget_cached()
    return locked


def rollout_complete(rollout: Rollout) -> Rollout:
    """The target gets all of the name's traffic (the others 0) and becomes the default if another version of the
    name was; the other ``ready`` versions go ``draining`` (no new runs; their runs in flight finish). One
    transaction; the rollout ends ``succeeded``."""
    now = timezone.now()
    with transaction.atomic():
        locked = _locked_rollout(rollout)
        versions = _locked_versions(locked.name)
        target = _ready_target(locked, versions)
        _set_weights(versions, {d.pk: (100 if d.pk == target.pk else 0) for d in versions})
        others = [d for d in versions if d.pk != target.pk]
        if any(d.is_default for d in others):
            # one_default_deployment is not deferrable: clear the old default before setting the new one.
            for row in others:
                if row.is_default:
                    row.is_default = False
                    row.save(update_fields=["is_default", "updated_at"])
            target.is_default = True
            target.save(update_fields=["is_default", "updated_at"])
        for row in others:
            if row.status == DeploymentStatus.READY:
                row.status = DeploymentStatus.DRAINING
                row.drained_at = now
                row.status_reason = f"Replaced by {target.key} (rollout {locked.pk})."
                row.save(update_fields=["status", "drained_at", "status_reason", "updated_at"])
        _finish(locked, status=RolloutStatus.SUCCEEDED)
    forget_cached()
    return locked


def _record_verdict(rollout: Rollout, *, health: StepHealth, ok: bool, verdict: str) -> None:
    with transaction.atomic():
        locked = _locked_rollout(rollout)
        history = list(locked.history)
        history[-1] = {**history[-1], "health": health.to_json(), "ok": ok, "verdict": verdict}
        locked.history = history
        locked.save(update_fields=["history"])
    rollout.history = history


# -- the whole rollout ---------------------------------------------------------------------------------------


def _wait_for_step(
    rollout: Rollout,
    thresholds: RolloutThresholds,
    *,
    since: datetime,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll_s: float,
) -> StepHealth:
    """Holds until ``step_wait_s`` passed and ``min_runs`` runs ended on the target (and, a feedback-gated step,
    both versions have ``min_feedback_ratings`` ratings), or ``step_timeout_s``."""
    began = clock()
    gated = thresholds.max_negative_feedback_delta is not None
    while True:
        elapsed = clock() - began
        health = rollout_step_health(rollout, since)
        rated = not gated or health.baseline is None or health.feedback_comparable(thresholds)
        if elapsed >= thresholds.step_wait_s and health.target.ended >= thresholds.min_runs and rated:
            return health
        if elapsed >= thresholds.step_timeout_s:
            return replace(health, timed_out=True)
        remaining = thresholds.step_timeout_s - elapsed
        if elapsed < thresholds.step_wait_s:
            remaining = min(remaining, thresholds.step_wait_s - elapsed)
        sleep(max(0.0, min(poll_s, remaining)))


def rollout_execute(
    *,
    name: str,
    to_version: str,
    steps: Sequence[int] = DEFAULT_STEPS,
    thresholds: RolloutThresholds | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    report: Callable[[str], Any] = print,
    poll_s: float = 2.0,
) -> Rollout:
    """A whole rollout, synchronously: start, then each step applied, held (:func:`_wait_for_step`) and judged; a
    failed step rolls back and returns the ``rolled_back`` rollout; the last step (100) passing completes it.
    Anything raised after the start (a database error, Ctrl-C) rolls back with status ``failed`` and is re-raised.
    ``report`` receives one line per step (figures and verdict)."""
    thresholds = thresholds or RolloutThresholds()
    rollout = rollout_start(name=name, to_version=to_version, steps=steps, thresholds=thresholds)
    target = rollout.to_deployment.key
    source = rollout.from_deployment.key if rollout.from_deployment is not None else "?"
    report(f"rollout {rollout.pk}: {source} -> {target}, steps {rollout.steps}")
    try:
        for number, weight in enumerate(rollout.steps, start=1):
            since = timezone.now()
            rollout = rollout_apply_step(rollout, weight)
            report(f"step {number} ({weight}%): {target} at {weight}%")
            health = _wait_for_step(rollout, thresholds, since=since, clock=clock, sleep=sleep, poll_s=poll_s)
            ok, verdict = rollout_judge(health, thresholds)
            _record_verdict(rollout, health=health, ok=ok, verdict=verdict)
            report(f"step {number} ({weight}%): {health.describe()}")
            report(f"step {number} ({weight}%): {'pass' if ok else 'FAIL'}: {verdict}")
            if not ok:
                rollout = rollout_rollback(rollout, f"step {number} ({weight}%): {verdict}")
                report(f"rolled back: weights restored ({rollout.reason})")
                return rollout
        rollout = rollout_complete(rollout)
        report(f"succeeded: {target} has all of the traffic; the versions it replaced drain")
        return rollout
    except BaseException as exc:
        _fail(rollout, exc, report)
        raise


def _fail(rollout: Rollout, exc: BaseException, report: Callable[[str], Any]) -> None:
    try:
        rollout_rollback(rollout, f"the rollout broke: {type(exc).__name__}: {exc}", status=RolloutStatus.FAILED)
    except RolloutConflict:
        return  # it had ended already (rolled back, or aborted by someone else): nothing to restore
    report(f"failed: weights restored after {type(exc).__name__}")
