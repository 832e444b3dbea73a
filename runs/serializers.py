from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from chats.serializers import StrictCharField
from runs.models import Run


class MessageCreateSerializer(serializers.Serializer[Any]):
    content = StrictCharField(allow_blank=False, trim_whitespace=False)
    max_tokens = serializers.IntegerField(required=False, min_value=1)
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0, default=0.7)
    top_p = serializers.FloatField(required=False, min_value=0.01, max_value=1.0, default=1.0)

    def __init__(self, *args: Any, max_content_chars: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["content"].max_length = max_content_chars
        self.fields["content"].validators.append(_max_length_validator(max_content_chars))

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty or only whitespace.")
        return value


def _max_length_validator(limit: int) -> Any:
    def check(value: str) -> None:
        if len(value) > limit:
            raise serializers.ValidationError(f"is {len(value)} characters long; the limit is {limit}.")

    return check


class RunOutSerializer(serializers.ModelSerializer[Run]):
    stream_url = serializers.SerializerMethodField()
    assistant_message = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id",
            "chat",
            "status",
            "finish_reason",
            "user_message",
            "assistant_message",
            "model",
            "max_tokens",
            "temperature",
            "top_p",
            "input_tokens",
            "output_tokens",
            "attempts",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "stream_url",
        ]

    def get_stream_url(self, run: Run) -> str:
        return reverse("run-stream", kwargs={"run_id": run.pk})

    def get_assistant_message(self, run: Run) -> dict[str, Any] | None:
        msg = run.assistant_message
        if msg is None:
            return None
        return {"id": msg.pk, "content": msg.content, "token_count": msg.token_count}
