"""Users and the service tiers that decide their share of the GPUs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractUser
from django.contrib.auth.models import UserManager as BaseUserManager
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
    max_request_messages = models.PositiveIntegerField(
        default=1024,
        help_text="Messages one OpenAI-compatible call may send (each is stored as a row of the call's record); "
        "more is a 400 and nothing is written.",
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
    memory_enabled = models.BooleanField(
        default=False,
        help_text="The user turned cross-chat memory on (docs/memory.md): their prompts are kept and recalled in "
        "their other chats. On the user row, so a prompt reads it with the user at no cost.",
    )

    objects = UserManager()  # type: ignore[misc]


class UserLimitOverride(models.Model):
    """Per-user exceptions to the tier's limits; an empty field means "as the tier says"."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="limit_override")
    bucket_capacity_tokens = models.PositiveIntegerField(null=True, blank=True)
    bucket_refill_per_s = models.FloatField(null=True, blank=True)
    max_concurrent_runs = models.PositiveSmallIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    share_weight = models.FloatField(
        null=True, blank=True, help_text="Fair-share weight among the tier's users (default 1; 2 = twice the share)."
    )
    note = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return f"Limits of {self.user}"


class UsageDay(models.Model):
    """Tokens one user consumed on one day (UTC), added to when each run ends."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    runs = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    embedding_requests = models.PositiveIntegerField(
        default=0, db_default=0, help_text="/v1/embeddings requests answered."
    )
    embedding_tokens = models.PositiveBigIntegerField(
        default=0, db_default=0, help_text="Input tokens those requests embedded."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "day"], name="usage_day_per_user")]
        ordering = ["-day", "user_id"]

    def __str__(self) -> str:
        return f"{self.user} {self.day}"
