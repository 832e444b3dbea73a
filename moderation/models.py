"""A tier's moderation policy, and the violations its checks found."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from accounts.models import Tier, User
from chats.models import Message


class OutputMode(models.TextChoices):
    """How the streamed answer is checked (the pass on the stream, in ``runs``, honours it)."""

    OFF = "off"
    """Not checked."""
    HOLDBACK = "holdback"
    """A window of ``holdback_tokens`` is held back before each flush and checked: nothing flagged reaches the
    client, at the cost of that window's latency."""
    RETRACT = "retract"
    """Flushed at once and checked behind; a hit stops the run, sends ``retract`` and ends with ``content_filter``."""


class BackendChoice(models.TextChoices):
    DEFAULT = "default", "default (MODERATION_BACKEND)"
    LOCAL = "local", "local (alt-profanity-check)"
    HTTP = "http", "http (OpenAI moderation API at MODERATION_HTTP_URL)"


class Direction(models.TextChoices):
    INPUT = "input"
    OUTPUT = "output"


class ModerationPolicy(models.Model):
    """What is checked for one tier's users, with what, and how repeated violations escalate.

    A tier without a row gets these fields' defaults (``moderation.selectors.moderation_policy``); a data migration
    gave every tier that existed then its row, so the admin lists them to edit."""

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="moderation_policy")
    input_enabled = models.BooleanField(default=True, help_text="Check each prompt before its run is queued.")
    output_mode = models.CharField(
        max_length=16,
        choices=OutputMode.choices,
        default=OutputMode.RETRACT,
        help_text="off; holdback (check a window before each flush: slower); retract (flush, check behind, retract).",
    )
    holdback_tokens = models.PositiveIntegerField(
        default=16, validators=[MinValueValidator(1)], help_text="The window (tokens) held back and checked."
    )
    backend = models.CharField(max_length=16, choices=BackendChoice.choices, default=BackendChoice.DEFAULT)
    threshold = models.FloatField(
        default=0.7,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="A category flags when its score is above this (0..1).",
    )
    allow_list = models.TextField(
        blank=True,
        default="",
        help_text="Terms or phrases never flagged for this tier, one per line (matched as whole words, any case): "
        "they are taken out of the text before it is classified.",
    )
    violations_before_suspension = models.PositiveSmallIntegerField(
        default=5, help_text="This many violations within the window suspend the user (0: never)."
    )
    violation_window_hours = models.PositiveIntegerField(
        default=24, validators=[MinValueValidator(1)], help_text="How far back violations count."
    )
    suspension_minutes = models.PositiveIntegerField(
        default=120, help_text="How long a suspension lasts, from the violation that triggered it."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "moderation policies"

    def __str__(self) -> str:
        return f"moderation policy of {self.tier.name}"


class Violation(models.Model):
    """One flagged prompt or answer: who, which direction, the pass's scores. Written by
    ``moderation.services.violation_record`` in the caller's transaction (with the refused message)."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="moderation_violations")
    tier_name = models.CharField(max_length=32, help_text="The user's tier when it happened.")
    direction = models.CharField(max_length=8, choices=Direction.choices)
    message = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="moderation_violations",
        help_text="The refused prompt or the retracted answer.",
    )
    backend = models.CharField(max_length=16)
    category_scores = models.JSONField(default=dict, help_text="Every score the backend gave.")
    flagged_categories = models.JSONField(default=list, help_text="The categories above the policy's threshold.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["user", "-created_at"], name="violation_user_time")]

    def __str__(self) -> str:
        return f"{self.direction} violation by {self.user_id} ({', '.join(self.flagged_categories)})"
