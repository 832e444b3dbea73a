from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from accounts.models import Tier, UsageDay, User, UserLimitOverride


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin[Tier]):
    list_display = [
        "name",
        "priority",
        "bucket_capacity_tokens",
        "bucket_refill_per_s",
        "max_concurrent_runs",
        "max_output_tokens",
        "queue_depth_limit",
        "share_floor",
        "context_limit_tokens",
        "max_request_messages",
    ]
    # The limits are what operators tune: edit them straight from the list (the name stays the link).
    list_editable = [
        "priority",
        "bucket_capacity_tokens",
        "bucket_refill_per_s",
        "max_concurrent_runs",
        "max_output_tokens",
        "queue_depth_limit",
        "share_floor",
        "context_limit_tokens",
        "max_request_messages",
    ]
    search_fields = ["name"]
    ordering = ["priority"]


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    list_display = ["username", "email", "tier", "is_staff", "is_active", "date_joined"]
    list_filter = ["tier", "memory_enabled", "is_staff", "is_active"]
    list_select_related = ["tier"]
    fieldsets = (
        *(BaseUserAdmin.fieldsets or ()),
        ("Service tier", {"fields": ("tier",)}),
        ("Memory", {"fields": ("memory_enabled",)}),
    )
    add_fieldsets = (*BaseUserAdmin.add_fieldsets, ("Service tier", {"fields": ("tier",)}))


@admin.register(UserLimitOverride)
class UserLimitOverrideAdmin(admin.ModelAdmin[UserLimitOverride]):
    list_display = [
        "user",
        "bucket_capacity_tokens",
        "bucket_refill_per_s",
        "max_concurrent_runs",
        "max_output_tokens",
        "share_weight",
        "note",
    ]
    search_fields = ["user__username", "note"]
    raw_id_fields = ["user"]
    list_select_related = ["user"]


@admin.register(UsageDay)
class UsageDayAdmin(admin.ModelAdmin[UsageDay]):
    list_display = ["day", "user", "runs", "input_tokens", "output_tokens", "embedding_requests", "embedding_tokens"]
    list_filter = ["day", "user__tier"]
    search_fields = ["user__username"]
    date_hierarchy = "day"
    raw_id_fields = ["user"]
    list_select_related = ["user"]
