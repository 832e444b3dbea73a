from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from accounts.models import Tier, User


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
    ]
    ordering = ["priority"]


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    list_display = ["username", "email", "tier", "is_staff", "is_active", "date_joined"]
    list_filter = ["tier", "is_staff", "is_active"]
    list_select_related = ["tier"]
    fieldsets = (*(BaseUserAdmin.fieldsets or ()), ("Service tier", {"fields": ("tier",)}))
    add_fieldsets = (*BaseUserAdmin.add_fieldsets, ("Service tier", {"fields": ("tier",)}))
