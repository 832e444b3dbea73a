"""Chats and their messages: the conversation record."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ChatOrigin(models.TextChoices):
    WEB = "web"
    """Made in the chat UI or through ``/api/chats``: listed in the user's sidebar, summarized as it grows."""
    API = "api"
    """One ``/v1/chat/completions`` call (the OpenAI-compatible API): its record, not a conversation to go on."""


class Chat(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chats")
    title = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now_add=True, help_text="Last activity: bumped by every message.")
    summary = models.TextField(blank=True, default="", help_text="Rolling summary of older turns.")
    summary_through = models.ForeignKey(
        "chats.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The last message the rolling summary covers.",
    )
    origin = models.CharField(
        max_length=8,
        choices=ChatOrigin.choices,
        default=ChatOrigin.WEB,
        help_text="web: a conversation in the UI/API; api: the record of one OpenAI-compatible call (not listed).",
    )
    model = models.CharField(
        max_length=201,
        blank=True,
        default="",
        help_text="The model its runs use: 'name' (a ready version by traffic weight, each run) or 'name@version' "
        "(pinned); empty: the default deployment's name.",
    )
    last_worker = models.CharField(
        max_length=200, blank=True, default="", help_text="Worker that served the last turn (prefix-cache affinity)."
    )

    class Meta:
        # The sidebar: one owner's conversations (origin web), most recent activity first.
        indexes = [models.Index(fields=["owner", "origin", "-updated_at", "-id"], name="chat_owner_origin_activity")]

    def __str__(self) -> str:
        return self.title or f"Chat {self.pk}"


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    """OpenAI's ``developer`` role, kept as sent: the chat template renders it as it renders any role (vLLM's server
    passes it to the template as it is too)."""
    TOOL = "tool"
    """A tool's result answering an assistant's tool call (OpenAI's ``tool`` role; the chat template renders it)."""


class Message(models.Model):
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    content = models.TextField()
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["chat", "-created_at", "-id"], name="message_chat_time")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
