from __future__ import annotations

from typing import Any

from rest_framework import serializers

from chats.models import Chat, Message


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, lists and objects instead of coercing them to text."""

    default_error_messages = {"not_text": "must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text")
        return str(super().to_internal_value(data))


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
