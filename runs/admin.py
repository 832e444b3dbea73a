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
    list_filter = ["status", "tier", ("user", admin.RelatedOnlyFieldListFilter), "finish_reason", "created_at"]
    search_fields = ["user__username", "error"]
    list_select_related = ["user", "tier"]
    raw_id_fields = ["chat", "user", "user_message", "assistant_message"]
    date_hierarchy = "created_at"
