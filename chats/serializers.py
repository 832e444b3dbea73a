"""Request and response shapes of the chat endpoints. Validation only: no business logic here."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from rest_framework import serializers

from chats.models import Chat, Message
from core.fields import StrictCharField, StrictFloatField, StrictIntegerField


class ChatOutSerializer(serializers.ModelSerializer[Chat]):
    class Meta:
        model = Chat
        fields = ["id", "title", "created_at", "updated_at"]


class ChatInSerializer(serializers.Serializer[Any]):
    title = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class ChatUpdateSerializer(serializers.Serializer[Any]):
    title = StrictCharField(max_length=200, allow_blank=True)


class MessageOutSerializer(serializers.ModelSerializer[Message]):
    class Meta:
        model = Message
        fields = ["id", "chat", "role", "content", "token_count", "created_at"]


class MessageCreateSerializer(serializers.Serializer[Any]):
    """A prompt. ``content`` is limited to ``CHAT_LIMITS.max_content_chars`` characters (read per request)."""

    content = StrictCharField(allow_blank=False, trim_whitespace=False)
    max_tokens = StrictIntegerField(required=False, min_value=1, help_text="Capped by the user's tier.")
    temperature = StrictFloatField(required=False, min_value=0.0, max_value=2.0, default=0.7)
    top_p = StrictFloatField(required=False, min_value=0.01, max_value=1.0, default=1.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Shown in the schema; the check itself is in validate_content so the message can say how long it was.
        cast(serializers.CharField, self.fields["content"]).max_length = settings.CHAT_LIMITS.max_content_chars

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty or only whitespace.")
        limit = settings.CHAT_LIMITS.max_content_chars
        if len(value) > limit:
            raise serializers.ValidationError(f"is {len(value)} characters long; the limit is {limit}.")
        return value
