from django.contrib import admin

from runs.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = [
        "id",
        "user",
        "tier",
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
        ("Counts", {"fields": ["input_tokens", "output_tokens", "reserved_tokens", "attempts"]}),
        ("Times", {"fields": ["created_at", "started_at", "first_token_at", "finished_at"]}),
    ]
    readonly_fields = ["created_at"]
    list_select_related = ["user", "tier"]
    raw_id_fields = ["chat", "user", "user_message", "assistant_message"]
    date_hierarchy = "created_at"
