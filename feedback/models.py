"""Answers' feedback: a user's thumbs up or down (with an optional reason) on the answer of one of their runs.

Stored per run, and with the deployment (``name@version``) that served it, so feedback is counted per version:
the admin, ``/metrics`` (``chat_feedback_total``) and feedback-gated rollout steps (``rollouts.health``) read it.
The run's owner is its only rater, so one row per run is one per user per run.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

MAX_REASON_CHARS = 1000


class Rating(models.TextChoices):
    """The strings are part of the API."""

    UP = "up"
    DOWN = "down"


class RunFeedback(models.Model):
    run = models.OneToOneField(
        "runs.Run",
        on_delete=models.CASCADE,
        related_name="feedback",
        help_text="The rated run (its assistant answer).",
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    deployment = models.ForeignKey(
        "deployments.ModelDeployment",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The version that served the run (copied from it: counted per version without a join).",
    )
    rating = models.CharField(max_length=8, choices=Rating.choices)
    reason = models.TextField(blank=True, default="", max_length=MAX_REASON_CHARS)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "run feedback"
        indexes = [models.Index(fields=["deployment", "rating", "updated_at"], name="feedback_deployment_rating")]

    def __str__(self) -> str:
        return f"{self.rating} on run {self.run_id}"
