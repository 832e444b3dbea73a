"""Users and the service tiers that decide their share of the GPUs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractUser, UserManager as BaseUserManager
from django.db import models


class Tier(models.Model):
    """A service level: scheduling priority and the limits that bound one user's consumption."""

    name = models.SlugField(max_length=32, unique=True, help_text="Also the Celery queue name.")
    priority = models.PositiveSmallIntegerField(
        help_text="Scheduling priority: lower is served first (also vLLM's request priority)."
    )
    bucket_capacity_tokens = models.PositiveIntegerField(
        help_text="Token-bucket size: the most tokens (input + max output) a user may reserve in a burst."
    )
    bucket_refill_per_s = models.FloatField(help_text="Tokens added to a user's bucket per second.")
    max_concurrent_runs = models.PositiveSmallIntegerField(
        help_text="Runs a user may have queued or streaming at once."
    )
    max_output_tokens = models.PositiveIntegerField(help_text="Cap on max_tokens for one run.")
    queue_depth_limit = models.PositiveIntegerField(
        help_text="Queued runs the tier accepts across all users before answering 429."
    )
    share_floor = models.FloatField(
        default=0.0,
        help_text="Fraction of dispatches guaranteed to this tier while it is backlogged (0..1).",
    )
    context_limit_tokens = models.PositiveIntegerField(
        help_text="Prompt budget for this tier's chats; older turns beyond it are summarized."
    )

    class Meta:
        ordering = ["priority"]

    def __str__(self) -> str:
        return self.name


DEFAULT_TIER_NAME = "free"


class UserManager(BaseUserManager["User"]):
    """Gives every new user the default tier unless one is named."""

    def _create_user_object(self, username: str, email: str | None, password: str | None, **extra: Any) -> User:
        if "tier" not in extra and "tier_id" not in extra:
            extra["tier"] = Tier.objects.get(name=DEFAULT_TIER_NAME)
        return super()._create_user_object(username, email, password, **extra)  # type: ignore[misc]


class User(AbstractUser):
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="users")

    objects = UserManager()  # type: ignore[misc]
