"""Request and response shapes of the memory endpoints. Validation only."""

from __future__ import annotations

from rest_framework import serializers

from core.http.fields import StrictBooleanField, StrictCharField
from core.http.serializers import StrictSerializer
from memory.models import MAX_MEMORY_CHARS, Memory


class MemoryOutSerializer(serializers.ModelSerializer[Memory]):
    chat_title = serializers.SerializerMethodField(help_text="The title of the chat it was said in; null: added.")

    class Meta:
        model = Memory
        fields = ["id", "content", "chat", "chat_title", "message", "created_at"]
        read_only_fields = fields

    def get_chat_title(self, memory: Memory) -> str | None:
        return memory.chat.title if memory.chat is not None else None


class MemoryInSerializer(StrictSerializer):
    content = StrictCharField(
        max_length=MAX_MEMORY_CHARS,
        allow_blank=False,
        help_text=f"Something to remember about you, 1..{MAX_MEMORY_CHARS} characters.",
    )

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Write something to remember: this is only whitespace.")
        return value


class MemoryListSerializer(StrictSerializer):
    """``GET /api/memories``'s query parameters."""

    q = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="Words to find in your memories (web-search syntax).",
    )
    cursor = serializers.CharField(required=False, allow_blank=True)
    limit = serializers.CharField(required=False, allow_blank=True)


class MemoryStateSerializer(serializers.Serializer[object]):
    enabled = serializers.BooleanField(help_text="Whether you turned memory on.")
    available = serializers.BooleanField(help_text="Whether memory may be on for your tier (the admin's switch).")
    count = serializers.IntegerField(help_text="How many memories you have.")


class MemoryStateInSerializer(StrictSerializer):
    enabled = StrictBooleanField(
        required=False, help_text="Turn memory on (keep and recall what you say across chats) or off."
    )
