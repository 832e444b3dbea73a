"""Moderation in the admin: a policy per tier, the violations with their scores, and each user's count.

The user list gains a ``violations`` column and the user page the user's latest violations: the accounts app sits
below this one and cannot know about violations, so this module extends its ``UserAdmin`` (re-registered)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from accounts.admin import UserAdmin
from accounts.models import User
from moderation.models import ModerationPolicy, Violation
from moderation.selectors import forget_cached_policies


@admin.register(ModerationPolicy)
class ModerationPolicyAdmin(admin.ModelAdmin[ModerationPolicy]):
    list_display = [
        "tier",
        "input_enabled",
        "output_mode",
        "holdback_tokens",
        "backend",
        "threshold",
        "violations_before_suspension",
        "violation_window_hours",
        "suspension_minutes",
    ]
    list_editable = [
        "input_enabled",
        "output_mode",
        "holdback_tokens",
        "backend",
        "threshold",
        "violations_before_suspension",
        "violation_window_hours",
        "suspension_minutes",
    ]
    list_select_related = ["tier"]
    ordering = ["tier__priority"]

    def save_model(self, request: HttpRequest, obj: ModerationPolicy, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        forget_cached_policies()  # this process at once; the others within MODERATION_POLICY_CACHE_S


def _top_score(violation: Violation) -> str:
    scores = violation.category_scores or {}
    if not scores:
        return "-"
    name = max(scores, key=lambda category: scores[category])
    return f"{name} {scores[name]:.2f}"


@admin.register(Violation)
class ViolationAdmin(admin.ModelAdmin[Violation]):
    """Read-only: violations are written by the passes, never by hand."""

    list_display = ["created_at", "user", "tier_name", "direction", "flagged", "top_score", "backend", "message"]
    list_filter = ["direction", "tier_name", "backend", "created_at"]
    search_fields = ["user__username"]
    date_hierarchy = "created_at"
    list_select_related = ["user", "message"]
    readonly_fields = [
        "user",
        "tier_name",
        "direction",
        "message",
        "backend",
        "category_scores",
        "flagged_categories",
        "created_at",
    ]

    @admin.display(description="flagged")
    def flagged(self, violation: Violation) -> str:
        return ", ".join(violation.flagged_categories)

    @admin.display(description="top score")
    def top_score(self, violation: Violation) -> str:
        return _top_score(violation)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Violation | None = None) -> bool:
        return False


class ViolationInline(admin.TabularInline[Violation, User]):
    model = Violation
    fields = ("created_at", "direction", "tier_name", "flagged_categories", "category_scores", "backend", "message")
    readonly_fields = fields
    ordering = ["-created_at"]
    extra = 0
    max_num = 0
    show_change_link = True
    verbose_name_plural = "moderation violations (newest first)"

    def has_add_permission(self, request: HttpRequest, obj: User | None = None) -> bool:
        return False


class ModeratedUserAdmin(UserAdmin):
    """accounts' ``UserAdmin`` with each user's violation count (a sortable column) and their violations."""

    list_display = [*UserAdmin.list_display, "violations"]
    inlines = [*UserAdmin.inlines, ViolationInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        return super().get_queryset(request).annotate(violation_total=Count("moderation_violations"))

    @admin.display(description="violations", ordering="violation_total")
    def violations(self, user: User) -> int:
        return getattr(user, "violation_total", 0)


admin.site.unregister(User)
admin.site.register(User, ModeratedUserAdmin)
