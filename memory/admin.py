"""Admin of memory: each tier's policy (memory is switched off for a tier here) and the memories (a user's opt-in is on
the user's page)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from memory.models import Memory, MemoryPolicy


@admin.register(MemoryPolicy)
class MemoryPolicyAdmin(admin.ModelAdmin[MemoryPolicy]):
    list_display = ["tier", "enabled", "top_k", "min_similarity", "max_tokens", "updated_at"]
    list_editable = ["enabled", "top_k", "min_similarity", "max_tokens"]
    list_select_related = ["tier"]


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin[Memory]):
    list_display = ["id", "user", "chat", "short_content", "embedding_model", "created_at"]
    list_filter = ["embedding_model"]
    search_fields = ["content", "user__username"]
    list_select_related = ["user", "chat"]
    exclude = ["embedding"]
    readonly_fields = ["user", "chat", "message", "content", "embedding_model", "created_at"]

    @admin.display(description="content")
    def short_content(self, memory: Memory) -> str:
        return memory.content[:80]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come from prompts and from their users (/api/memories)
