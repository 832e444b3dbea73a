"""Per-tier route policies for ``model: "auto"`` (see docs/routing.md)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from accounts.models import Tier
from deployments.models import MODEL_SPEC_PATTERN

model_spec_validator = RegexValidator(
    MODEL_SPEC_PATTERN, "Send 'name' or 'name@version' (letters, digits, '.', '_' and '-'), or leave it empty."
)


class RoutePolicy(models.Model):
    """How ``model: "auto"`` is routed for one tier: the two candidates, the rules' thresholds, the classifier's
    threshold and whether the tier spills to the small model while the large one is full for it."""

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="route_policy")
    enabled = models.BooleanField(
        default=True, help_text="Off: 'auto' is served by the default deployment, with no routing."
    )
    default_model_auto = models.BooleanField(
        default=False,
        help_text="A prompt that names no model goes through the router too (as if it named 'auto').",
    )
    small_model = models.CharField(
        max_length=201,
        blank=True,
        default="",
        validators=[model_spec_validator],
        help_text="The cheap deployment: 'name' or 'name@version'; empty: the default deployment.",
    )
    large_model = models.CharField(
        max_length=201,
        blank=True,
        default="",
        validators=[model_spec_validator],
        help_text="The capable deployment: 'name' or 'name@version'; empty: the default deployment.",
    )
    max_small_prompt_tokens = models.PositiveIntegerField(
        default=1024, help_text="Rule: a prompt longer than this (tokens, history included) goes to the large model."
    )
    max_small_output_tokens = models.PositiveIntegerField(
        default=512, help_text="Rule: a max_tokens above this goes to the large model."
    )
    tools_need_large = models.BooleanField(default=True, help_text="Rule: a prompt with tools goes to the large model.")
    structured_needs_large = models.BooleanField(
        default=True, help_text="Rule: a prompt that requires structured output goes to the large model."
    )
    difficulty_threshold = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.01)],
        help_text="Classifier: a difficulty score (0..1) at or above this goes to the large model "
        "(0: always large, 1.01: never).",
    )
    spill_enabled = models.BooleanField(
        default=False,
        help_text="While the large model's dispatch gate is closed for this tier, its prompts go to the small "
        "model instead of waiting (lower tiers' gates close first, so they spill first).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "route policy"
        verbose_name_plural = "route policies"

    def __str__(self) -> str:
        return f"Route policy of {self.tier.name}" if self.tier_id else "Route policy"
