"""Response shapes of runs. No reads here: a run's queue position comes in the serializer context
(``positions``, from ``runs.selectors.run_queue_positions``, one batched read per response)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chats.models import Chat, Message
from chats.serializers import ChatOutSerializer, MessageOutSerializer
from deployments.selection import deployment_by_id
from runs.models import Run, RunStatus
from runs.selectors import Answers
from scheduling.store import Position


class RatingOutSerializer(serializers.Serializer[Any]):
    rating = serializers.ChoiceField(choices=[("up", "Up"), ("down", "Down")])  # feedback.models.Rating
    reason = serializers.CharField()


def run_feedback(run: Run) -> dict[str, str] | None:
    """The run's rating (``feedback.RunFeedback``, through the reverse one-to-one ``Run.feedback`` that app adds):
    read from what the selector loaded (``select_related("feedback")``); an unfinished run has none, unread."""
    if not RunStatus(run.status).is_terminal:
        return None
    try:
        feedback = run.feedback  # type: ignore[attr-defined]
    except ObjectDoesNotExist:
        return None
    return {"rating": feedback.rating, "reason": feedback.reason}


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
    feedback = serializers.SerializerMethodField(help_text="The user's rating of its answer (null: none).")

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
            "passes",
            "recovery",
            "resumed_tokens",
            "revision",
            "replaces",
            "feedback",
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

    @extend_schema_field(RatingOutSerializer(allow_null=True))
    def get_feedback(self, run: Run) -> dict[str, str] | None:
        return run_feedback(run)

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


class VersionOutSerializer(serializers.Serializer[Any]):
    message = serializers.IntegerField()
    run = serializers.IntegerField()
    content = serializers.CharField()
    finish_reason = serializers.CharField()
    revision = serializers.CharField(help_text="How this version came: '' (the first answer), regenerate or continue.")
    created_at = serializers.DateTimeField()
    feedback = RatingOutSerializer(allow_null=True)


class MessageListOutSerializer(MessageOutSerializer):
    """A message of the message list. Context: ``answers`` (:class:`runs.selectors.Answers` of the page)."""

    run = serializers.SerializerMethodField(help_text="For an answer: the run that wrote it (rate it there).")
    finish_reason = serializers.SerializerMethodField(help_text="For an answer: why its run ended.")
    feedback = serializers.SerializerMethodField(help_text="For an answer: the user's rating (null: none).")
    versions = serializers.SerializerMethodField(
        help_text="For an answer: its earlier versions (regenerated, or continued into this one), oldest first."
    )

    class Meta(MessageOutSerializer.Meta):
        fields = [*MessageOutSerializer.Meta.fields, "run", "finish_reason", "feedback", "versions"]

    def _run(self, message: Message) -> Run | None:
        answers: Answers = self.context["answers"]
        return answers.run_of.get(message.pk)

    def get_run(self, message: Message) -> int | None:
        run = self._run(message)
        return run.pk if run is not None else None

    def get_finish_reason(self, message: Message) -> str | None:
        run = self._run(message)
        return run.finish_reason if run is not None else None

    @extend_schema_field(RatingOutSerializer(allow_null=True))
    def get_feedback(self, message: Message) -> dict[str, str] | None:
        run = self._run(message)
        return run_feedback(run) if run is not None else None

    @extend_schema_field(VersionOutSerializer(many=True))
    def get_versions(self, message: Message) -> list[dict[str, Any]]:
        answers: Answers = self.context["answers"]
        versions = []
        for run in answers.versions_of.get(message.pk, []):
            answer = run.assistant_message
            if answer is None:  # the selector loads answered runs only
                continue
            versions.append(
                {
                    "message": answer.pk,
                    "run": run.pk,
                    "content": answer.content,
                    "finish_reason": run.finish_reason,
                    "revision": run.revision,
                    "created_at": answer.created_at,
                    "feedback": run_feedback(run),
                }
            )
        return versions
