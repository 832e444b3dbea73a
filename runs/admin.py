from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from runs.models import FinishReason, Run


class FlaggedFilter(admin.SimpleListFilter):
    """Runs a moderation pass flagged: their answer retracted (``content_filter``). A refused prompt has no run: it is
    a violation (Moderation > Violations), its message kept in the chat as refused."""

    title = "moderation"
    parameter_name = "flagged"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("retracted", "answer retracted (content_filter)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        if self.value() == "retracted":
            return queryset.filter(finish_reason=FinishReason.CONTENT_FILTER)
        return queryset


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = [
        "id",
        "user",
        "tier",
        "model",
        "status",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "reserved_tokens",
        "attempts",
        "worker",
        "created_at",
        "finished_at",
    ]
    list_filter = [
        FlaggedFilter,
        "status",
        "tier",
        ("user", admin.RelatedOnlyFieldListFilter),
        "finish_reason",
        "prompt_mode",
        "created_at",
    ]
    search_fields = ["user__username", "end_user", "error"]
    fieldsets = [
        (None, {"fields": ["chat", "user", "tier", "end_user", "status", "finish_reason", "error", "worker"]}),
        ("Messages", {"fields": ["user_message", "assistant_message", "prompt_mode"]}),
        (
            "What was asked",
            {
                "fields": ["model", "priority", "max_tokens", "temperature", "top_p", "sampling", "tools"],
                "description": "Sampling parameters as the request gave them; 'sampling' holds those that differ "
                "from their defaults (stop, seed, penalties, logprobs, structured outputs, constraint...).",
            },
        ),
        (
            "Passes",
            {
                "fields": ["passes"],
                "description": "What each pass around the run decided, in order (docs/passes.md): input moderation "
                "(backend, categories, top scores), routing (policy, reason, difficulty score, deployment), output "
                "moderation (mode, checks, their cost; on a hit the categories and scores).",
            },
        ),
        ("Counts", {"fields": ["input_tokens", "output_tokens", "reserved_tokens", "attempts"]}),
        ("Times", {"fields": ["created_at", "started_at", "first_token_at", "finished_at"]}),
    ]
    readonly_fields = ["created_at"]
    list_select_related = ["user", "tier"]
    raw_id_fields = ["chat", "user", "user_message", "assistant_message"]
    date_hierarchy = "created_at"
