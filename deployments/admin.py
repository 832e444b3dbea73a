"""Deployments in the admin: what each serves, its live workers and traffic, and the weights operators tune.

A deployment becomes ``ready`` only through verification (the "Materialize and verify" action, or
``manage.py deployment_register``), so its status, checksum and local copy are read-only here. Rollouts are a
read-only record: they are driven step by step elsewhere, never edited by hand.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import redis
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from deployments.host_cache import HostCacheStatus, host_cache_statuses
from deployments.models import ModelDeployment, Rollout
from deployments.registration import (
    MATERIALIZABLE,
    RegistrationError,
    materialize_deployment,
    validate_engine_args,
    validate_source,
)
from deployments.selection import forget_cached
from generation.worker_contract import WorkerHeartbeat, worker_heartbeats

ACTIVE_RUN_STATUSES = ("queued", "streaming", "cancelling")
"""A copy of ``runs.models.ACTIVE_STATUSES``, the runs not ended yet, as strings: ``deployments`` sits below ``runs``
and cannot import it. ``tests/deployments/test_active_statuses.py`` keeps the two (and every other copy) equal."""
REDIS_DOWN = "Redis unavailable"


def live_workers_by_deployment() -> dict[str, list[WorkerHeartbeat]] | None:
    """Each deployment key's live workers (one Redis read); None when Redis does not answer."""
    try:
        beats = worker_heartbeats()
    except redis.RedisError:
        return None
    workers: dict[str, list[WorkerHeartbeat]] = {}
    for beat in beats:
        if beat.deployment:
            workers.setdefault(beat.deployment, []).append(beat)
    return workers


def host_caches_by_deployment(keys: list[str]) -> dict[str, list[HostCacheStatus]] | None:
    """Each deployment key's workers' reports on their per-host copies (one Redis read); None when Redis is down."""
    try:
        return host_cache_statuses(keys)
    except redis.RedisError:
        return None


class DeploymentChangeList(ChangeList):
    """Reads the workers' heartbeats and cache reports once for the page's rows, not once per row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        workers = live_workers_by_deployment()
        caches = host_caches_by_deployment([row.key for row in self.result_list])
        for row in self.result_list:
            row.live_worker_beats = None if workers is None else workers.get(row.key, [])
            row.host_cache_reports = None if caches is None else caches.get(row.key, [])


class ModelDeploymentForm(forms.ModelForm[ModelDeployment]):
    """Checks what registration checks: vLLM engine argument names and, while editable, the source folder."""

    class Meta:
        model = ModelDeployment
        fields = [
            "name",
            "version",
            "source_kind",
            "source_path",
            "engine_args",
            "traffic_weight",
            "is_default",
            "cost_per_million_input_tokens",
            "cost_per_million_output_tokens",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            if "engine_args" in data:
                data["engine_args"] = validate_engine_args(data["engine_args"])
            if "source_kind" in data and "source_path" in data:
                data["source_path"] = validate_source(data["source_kind"], data["source_path"])
        except RegistrationError as exc:
            raise forms.ValidationError(exc.message) from exc
        return data


@admin.register(ModelDeployment)
class ModelDeploymentAdmin(admin.ModelAdmin[ModelDeployment]):
    form = ModelDeploymentForm
    list_display = [
        "key",
        "version",
        "status",
        "traffic_weight",
        "is_default",
        "live_workers",
        "host_caches",
        "active_runs",
        "runs_last_hour",
        "ready_at",
    ]
    # Weights are what operators tune between rollouts: edit them from the list (the key stays the link).
    list_editable = ["traffic_weight"]
    list_display_links = ["key"]
    list_filter = ["status", "name"]
    search_fields = ["name", "version", "local_path"]
    actions = ["materialize_and_verify"]
    fieldsets = [
        (None, {"fields": ["name", "version", "status", "status_reason", "traffic_weight", "is_default"]}),
        ("Weights", {"fields": ["source_kind", "source_path", "local_path", "checksum", "engine_args"]}),
        ("Serving", {"fields": ["live_workers", "host_caches"]}),
        ("Cost", {"fields": ["cost_per_million_input_tokens", "cost_per_million_output_tokens"]}),
        ("Times", {"fields": ["created_at", "updated_at", "ready_at", "drained_at", "retired_at"]}),
    ]
    readonly_fields = [
        "status",
        "status_reason",
        "local_path",
        "checksum",
        "live_workers",
        "host_caches",
        "created_at",
        "updated_at",
        "ready_at",
        "drained_at",
        "retired_at",
    ]
    SOURCE_FIELDS = ["name", "version", "source_kind", "source_path"]

    def get_readonly_fields(self, request: HttpRequest, obj: ModelDeployment | None = None) -> list[str]:
        """The source of a deployment that was materialized is fixed: other weights are another version."""
        fixed = obj is not None and obj.status not in MATERIALIZABLE
        return [*self.readonly_fields, *(self.SOURCE_FIELDS if fixed else [])]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelDeployment]:
        hour_ago = timezone.now() - timedelta(hours=1)
        return (
            super()
            .get_queryset(request)
            .annotate(
                active_run_count=Count("runs", filter=Q(runs__status__in=ACTIVE_RUN_STATUSES)),
                runs_last_hour_count=Count("runs", filter=Q(runs__created_at__gte=hour_ago)),
            )
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeploymentChangeList

    def save_model(self, request: HttpRequest, obj: ModelDeployment, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        forget_cached()  # this process sees a weight change at once; the others within DEPLOYMENT_CACHE_S

    @admin.display(description="deployment", ordering="name")
    def key(self, obj: ModelDeployment) -> str:
        return obj.key

    @admin.display(description="live workers")
    def live_workers(self, obj: ModelDeployment) -> str:
        beats: list[WorkerHeartbeat] | None
        if hasattr(obj, "live_worker_beats"):
            beats = obj.live_worker_beats
        else:  # the detail page: one deployment, one read
            workers = live_workers_by_deployment()
            beats = None if workers is None else workers.get(obj.key, [])
        if beats is None:
            return REDIS_DOWN
        if not beats:
            return "0"
        names = ", ".join(f"{beat.worker} ({beat.state})" for beat in sorted(beats, key=lambda b: b.worker))
        return f"{len(beats)}: {names}"

    @admin.display(description="worker caches")
    def host_caches(self, obj: ModelDeployment) -> str:
        """Each worker's report on its own copy (MODEL_CACHE_MODE=per_host): filling with its progress, ready, or
        failed with the reason (a worker that failed refuses to serve)."""
        reports: list[HostCacheStatus] | None
        if hasattr(obj, "host_cache_reports"):
            reports = obj.host_cache_reports
        else:
            caches = host_caches_by_deployment([obj.key])
            reports = None if caches is None else caches.get(obj.key, [])
        if reports is None:
            return REDIS_DOWN
        return "; ".join(report.summary() for report in reports) or "-"

    @admin.display(description="active runs", ordering="active_run_count")
    def active_runs(self, obj: ModelDeployment) -> int:
        return int(getattr(obj, "active_run_count", 0))

    @admin.display(description="runs in the last hour", ordering="runs_last_hour_count")
    def runs_last_hour(self, obj: ModelDeployment) -> int:
        return int(getattr(obj, "runs_last_hour_count", 0))

    @admin.action(description="Materialize and verify")
    def materialize_and_verify(self, request: HttpRequest, queryset: QuerySet[ModelDeployment]) -> None:
        """Copies and verifies each selected registered or failed deployment; says per row how it went."""
        for row in queryset.order_by("name", "version"):
            if row.status not in MATERIALIZABLE:
                self.message_user(
                    request,
                    f"{row.key}: skipped, it is {row.status} (only registered or failed ones are materialized).",
                    messages.WARNING,
                )
                continue
            try:
                materialize_deployment(row)
            except RegistrationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.message_user(
                    request, f"{row.key}: ready at {row.local_path} (sha256 {row.checksum[:12]}…).", messages.SUCCESS
                )


def _pretty_json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


ROLLOUT_FIELDS: tuple[str, ...] = (
    "name",
    "from_deployment",
    "to_deployment",
    "status",
    "steps",
    "reason",
    "thresholds_json",
    "previous_weights_json",
    "history_json",
    "started_at",
    "finished_at",
)


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin[Rollout]):
    """A read-only record of each rollout (they are started and stepped by commands, never edited here)."""

    list_display = ["name", "from_deployment", "to_deployment", "status", "steps", "started_at", "finished_at"]
    list_filter = ["status", "name"]
    list_select_related = ["from_deployment", "to_deployment"]
    fields = ROLLOUT_FIELDS
    readonly_fields = ROLLOUT_FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Rollout | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Rollout | None = None) -> bool:
        return False

    @admin.display(description="thresholds")
    def thresholds_json(self, obj: Rollout) -> str:
        return _pretty_json(obj.thresholds)

    @admin.display(description="previous weights")
    def previous_weights_json(self, obj: Rollout) -> str:
        return _pretty_json(obj.previous_weights)

    @admin.display(description="history")
    def history_json(self, obj: Rollout) -> str:
        return _pretty_json(obj.history)
