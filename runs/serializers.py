"""Response shapes of runs. No reads here: a run's queue position comes in the serializer context
(``positions``, from ``runs.selectors.run_queue_positions``, one batched read per response)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chats.models import Chat
from chats.serializers import ChatOutSerializer
from deployments.selection import deployment_by_id
from runs.models import Run
from scheduling.store import Position


class RunOutSerializer(serializers.ModelSerializer[Run]):
    """Context: ``positions`` (run id → :class:`Position`) for the queued runs being serialized."""

    stream_url = serializers.SerializerMethodField()
    assistant_message = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField(
        help_text="While queued: 1 = dispatched next (null when not queued or not yet computed)."
    )
    estimated_wait_s = serializers.SerializerMethodField(
        help_text="While queued: seconds until dispatch at the recent dispatch rate (null when unknown)."
    )
    deployment = serializers.SerializerMethodField(
        help_text="The `name@version` the run is routed to and served by (null: one from before versioning)."
    )

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
            "deployment",
            "recovery",
            "resumed_tokens",
            "max_tokens",
            "temperature",
            "top_p",
            "metadata",
            "input_tokens",
            "output_tokens",
            "attempts",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "stream_url",
            "queue_position",
            "estimated_wait_s",
        ]

    def _position(self, run: Run) -> Position | None:
        positions: dict[int, Position] = self.context.get("positions", {})
        return positions.get(run.pk)

    def get_queue_position(self, run: Run) -> int | None:
        pos = self._position(run)
        return pos.queue_position if pos is not None else None

    def get_estimated_wait_s(self, run: Run) -> float | None:
        pos = self._position(run)
        return pos.estimated_wait_s if pos is not None else None

    def get_deployment(self, run: Run) -> str | None:
        served = deployment_by_id(run.deployment_id)  # the selection snapshot: no query per run
        return served.key if served is not None else None

    def get_stream_url(self, run: Run) -> str:
        return reverse("run-stream", kwargs={"run_id": run.pk})

    def get_assistant_message(self, run: Run) -> dict[str, Any] | None:
        msg = run.assistant_message
        if msg is None:
            return None
        return {"id": msg.pk, "content": msg.content, "token_count": msg.token_count}


class ChatDetailOutSerializer(ChatOutSerializer):
    """One chat with its unfinished run, if any: a client reloading the page resumes that run's stream.

    Context: ``active_run`` (the run or None, from ``runs.selectors.run_active_for_chat``) and ``positions``.
    """

    active_run = serializers.SerializerMethodField()

    class Meta(ChatOutSerializer.Meta):
        fields = [*ChatOutSerializer.Meta.fields, "active_run"]

    @extend_schema_field(RunOutSerializer(allow_null=True))
    def get_active_run(self, chat: Chat) -> dict[str, Any] | None:
        run: Run | None = self.context.get("active_run")
        return dict(RunOutSerializer(run, context=self.context).data) if run else None
