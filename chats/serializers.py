"""Request and response shapes of the chat endpoints. Validation only: no business logic here."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.core.validators import RegexValidator
from rest_framework import serializers

from chats.models import MAX_SYSTEM_PROMPT_CHARS, Chat, Message
from core.http.fields import StrictCharField, StrictFloatField, StrictIntegerField
from core.http.serializers import StrictSerializer
from deployments.models import MODEL_SPEC_PATTERN
from generation.sampling import INT64_MAX, INT64_MIN, MAX_STOP_SEQUENCES, SamplingError, SamplingSpec, check_sampling
from generation.structured_outputs import structured_from_request

DEFAULT_TEMPERATURE = 0.7
"""A run's temperature when neither its prompt nor its chat's settings name one."""

MODEL_HELP = (
    "'name' (each run goes to a ready version of it, by the versions' traffic weights) or 'name@version' (pinned "
    "to that version); empty: the default model. GET /api/models lists them."
)


def model_field(*, allow_blank: bool, help_text: str = MODEL_HELP, **kwargs: Any) -> StrictCharField:
    """``model``: ``name`` or ``name@version``, with the pattern in the schema (one that names no served model is a
    404 ``model_not_found`` from ``deployments.selection``, naming those there are)."""
    message = "Send 'name' or 'name@version': letters, digits, '.', '_' and '-' (GET /api/models lists them)."
    pattern = MODEL_SPEC_PATTERN if not allow_blank else f"(?:{MODEL_SPEC_PATTERN})|^$"
    return StrictCharField(
        max_length=201,
        allow_blank=allow_blank,
        validators=[RegexValidator(pattern, message)],
        help_text=help_text,
        **kwargs,
    )


class ChatOutSerializer(serializers.ModelSerializer[Chat]):
    class Meta:
        model = Chat
        fields = ["id", "title", "model", "system_prompt", "temperature", "created_at", "updated_at"]


class ChatInSerializer(StrictSerializer):
    title = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    model = model_field(allow_blank=True, required=False, default="")


class ChatUpdateSerializer(StrictSerializer):
    """A partial update (PATCH): every field is optional, and a field left out keeps its value."""

    title = StrictCharField(max_length=200, required=False, allow_blank=True, help_text="The new title.")
    model = model_field(allow_blank=True, required=False)
    system_prompt = StrictCharField(
        max_length=MAX_SYSTEM_PROMPT_CHARS,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="The system prompt of the chat's later runs; empty: the server's default.",
    )
    temperature = StrictFloatField(
        required=False,
        allow_null=True,
        min_value=0.0,
        max_value=2.0,
        help_text="Sampling temperature of the chat's later runs when a prompt names none; null: the default (0.7).",
    )


class ChatSearchSerializer(StrictSerializer):
    """``GET /api/chats/search``'s query parameters (besides the page's ``cursor`` and ``limit``)."""

    q = StrictCharField(
        max_length=200,
        allow_blank=False,
        help_text='Words to find in the titles and messages of your chats (web-search syntax: "a phrase", or, -word).',
    )
    cursor = serializers.CharField(required=False, allow_blank=True)
    limit = serializers.CharField(required=False, allow_blank=True)

    def validate_q(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty or only whitespace.")
        return value


class ChatSearchHitSerializer(serializers.Serializer[Any]):
    chat = serializers.IntegerField()
    title = serializers.CharField()
    message = serializers.IntegerField(allow_null=True, help_text="The newest matching message (null: the title).")
    snippet = serializers.CharField(help_text="Plain text (never HTML) around the words found.")
    highlights = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, end) character offsets of the words found in `snippet`.",
    )
    updated_at = serializers.DateTimeField()


class ChatExportSerializer(StrictSerializer):
    format = serializers.ChoiceField(choices=["markdown", "json"], required=False, default="markdown")


class MessageOutSerializer(serializers.ModelSerializer[Message]):
    class Meta:
        model = Message
        fields = ["id", "chat", "role", "content", "token_count", "created_at", "moderation"]


class MessageCreateSerializer(StrictSerializer):
    """A prompt. ``content`` is limited to ``CHAT_LIMITS.max_content_chars`` characters (read per request).

    The sampling options are checked as vLLM checks them (``generation.sampling``); the validated body carries them
    as ``spec``. Options this endpoint does not take (``ignore_eos``, ``logprobs``...: the OpenAI-compatible
    ``/v1`` takes them) are unknown fields, refused with a 400 instead of being dropped (``StrictSerializer``).
    """

    content = StrictCharField(allow_blank=False, trim_whitespace=False, allow_nul=True)
    model = model_field(
        allow_blank=True,  # empty: the default model, as for a chat (MODEL_HELP)
        required=False,
        help_text=f"This run's model, which the chat then keeps for its next runs. {MODEL_HELP} Left out: the "
        "chat's model.",
    )
    max_tokens = StrictIntegerField(required=False, min_value=1, help_text="Capped by the user's tier.")
    temperature = StrictFloatField(
        required=False,
        min_value=0.0,
        max_value=2.0,
        help_text="Left out: the chat's temperature setting, else 0.7.",
    )
    top_p = StrictFloatField(required=False, min_value=0.01, max_value=1.0, default=1.0)
    stop = serializers.ListField(
        child=StrictCharField(allow_blank=False, trim_whitespace=False, max_length=200),
        required=False,
        max_length=MAX_STOP_SEQUENCES,
        help_text="Stop sequences: the answer ends before the first one, which is not part of it.",
    )
    seed = StrictIntegerField(
        required=False,
        min_value=INT64_MIN,
        max_value=INT64_MAX,
        help_text="Sampling seed: the same seed, prompt and settings give the same answer.",
    )
    response_format = serializers.JSONField(
        required=False,
        help_text='As OpenAI\'s: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
        '"json_schema": {"name", "schema", "strict"}}. The answer is constrained to it while it is generated.',
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read per request (tests change it); StrictCharField checks it and the schema shows it.
        cast(serializers.CharField, self.fields["content"]).max_length = settings.CHAT_LIMITS.max_content_chars
        # For the schema only: no tier gets more output than the model's window. run_create refuses more (the
        # tier's cap, or a prompt budget below zero) with a message that names the cap.
        cast(serializers.IntegerField, self.fields["max_tokens"]).max_value = settings.ENGINE.max_model_len

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty or only whitespace.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            structured = structured_from_request(attrs.get("response_format"), None)  # compiled there
            spec = SamplingSpec(
                temperature=attrs.get("temperature", DEFAULT_TEMPERATURE),
                top_p=attrs["top_p"],
                seed=attrs.get("seed"),
                stop=tuple(attrs.get("stop") or ()),
                structured_outputs=structured,
            )
            check_sampling(spec, max_tokens=attrs.get("max_tokens"))
        except SamplingError as exc:
            field = exc.param.split(".", 1)[0]
            key = field if field in self.fields else "non_field_errors"
            raise serializers.ValidationError({key: [exc.message]}) from None
        attrs["spec"] = spec
        attrs["temperature_from_chat"] = "temperature" not in attrs
        return attrs
