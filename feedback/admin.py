"""Admin of answers' feedback: the ratings, with counts and the negative rate per version and per day on top."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from deployments.models import ModelDeployment
from feedback import selectors
from feedback.models import RunFeedback
from feedback.selectors import FeedbackTally


def _rate(tally: FeedbackTally) -> str:
    rate = tally.negative_rate
    return "-" if rate is None else f"{rate:.1%}"


@admin.register(RunFeedback)
class RunFeedbackAdmin(admin.ModelAdmin[RunFeedback]):
    list_display = ["run", "rating", "deployment", "user", "short_reason", "updated_at"]
    list_filter = ["rating", "deployment"]
    search_fields = ["reason"]
    list_select_related = ["deployment", "user"]
    readonly_fields = ["run", "user", "deployment", "rating", "reason", "created_at", "updated_at"]
    date_hierarchy = "updated_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # ratings come from users

    @admin.display(description="reason")
    def short_reason(self, obj: RunFeedback) -> str:
        return obj.reason[:80]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        versions = {d.pk: d.key for d in ModelDeployment.objects.all()}

        def name(deployment_id: int | None) -> str:
            return versions.get(deployment_id, "(gone)") if deployment_id is not None else "(none)"

        context = {
            "feedback_versions": [
                {"version": name(pk), "tally": tally, "rate": _rate(tally)}
                for pk, tally in selectors.feedback_by_deployment().items()
            ],
            "feedback_days": [
                {"day": day, "version": name(pk), "tally": tally, "rate": _rate(tally)}
                for day, pk, tally in selectors.feedback_by_day()
            ],
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=context)
