"""Request and response shapes of the feedback endpoints. Validation only."""

from __future__ import annotations

from rest_framework import serializers

from core.http.fields import StrictCharField
from core.http.serializers import StrictSerializer
from feedback.models import MAX_REASON_CHARS, Rating, RunFeedback


class FeedbackInSerializer(StrictSerializer):
    rating = serializers.ChoiceField(choices=Rating.choices, help_text="`up` or `down`.")
    reason = StrictCharField(
        max_length=MAX_REASON_CHARS, required=False, allow_blank=True, default="", help_text="Why (optional)."
    )


class FeedbackOutSerializer(serializers.ModelSerializer[RunFeedback]):
    class Meta:
        model = RunFeedback
        fields = ["run", "rating", "reason", "updated_at"]
