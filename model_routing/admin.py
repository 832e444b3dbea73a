"""Route policies in the admin: one per tier, every threshold editable (a save reaches every web process within
``DEPLOYMENT_CACHE_S``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from model_routing.models import RoutePolicy
from model_routing.selectors import forget_route_policies


@admin.register(RoutePolicy)
class RoutePolicyAdmin(admin.ModelAdmin[RoutePolicy]):
    list_display = [
        "tier",
        "enabled",
        "default_model_auto",
        "small_model",
        "large_model",
        "difficulty_threshold",
        "spill_enabled",
    ]
    list_editable = ["enabled", "default_model_auto", "difficulty_threshold", "spill_enabled"]
    list_select_related = ["tier"]
    ordering = ["tier__priority"]
    fieldsets = [
        (None, {"fields": ["tier", "enabled", "default_model_auto", "small_model", "large_model"]}),
        (
            "Rules",
            {
                "fields": [
                    "max_small_prompt_tokens",
                    "max_small_output_tokens",
                    "tools_need_large",
                    "structured_needs_large",
                ]
            },
        ),
        ("Classifier and spill", {"fields": ["difficulty_threshold", "spill_enabled"]}),
    ]

    def save_model(self, request: HttpRequest, obj: RoutePolicy, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        forget_route_policies()
