"""Admin of the answer cache: each tier's policy (the shared scope is an opt-in here), and the entries."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from answer_cache.models import CacheEntry, CachePolicy


@admin.register(CachePolicy)
class CachePolicyAdmin(admin.ModelAdmin[CachePolicy]):
    list_display = ["tier", "enabled", "shared_scope", "threshold", "ttl_s", "allow_sampled", "updated_at"]
    list_editable = ["enabled", "shared_scope", "threshold", "ttl_s", "allow_sampled"]
    list_select_related = ["tier"]


@admin.register(CacheEntry)
class CacheEntryAdmin(admin.ModelAdmin[CacheEntry]):
    list_display = ["id", "user", "scope", "deployment_key", "short_prompt", "hits", "created_at", "expires_at"]
    list_filter = ["deployment_key", "embedding_model"]
    search_fields = ["prompt"]
    list_select_related = ["user"]
    exclude = ["embedding"]
    readonly_fields = [
        "user",
        "scope",
        "partition",
        "deployment",
        "deployment_key",
        "embedding_model",
        "prompt",
        "answer",
        "input_tokens",
        "output_tokens",
        "source_run_id",
        "created_at",
        "expires_at",
        "hits",
        "last_hit_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # entries come from runs; an admin may delete one (the row check refuses it at once)

    @admin.display(description="prompt")
    def short_prompt(self, obj: CacheEntry) -> str:
        return obj.prompt[:80]
