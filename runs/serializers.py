from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from runs.models import Run


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
