"""Chats and their messages: the conversation record."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models

from core.nul_text import NulSafeTextField

SEARCH_CONFIG = "simple"
"""The text-search configuration of chat search: ``simple`` (lower-cased words, no stemming, no stop words) treats
every language alike; the GIN indexes are built on exactly the vectors ``chats.selectors.chat_search`` queries."""

MAX_SYSTEM_PROMPT_CHARS = 4000


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
    summary = NulSafeTextField(blank=True, default="", help_text="Rolling summary of older turns.")
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
    system_prompt = models.TextField(
        blank=True,
        default="",
        help_text="The chat's own system prompt for its runs (empty: the server's CONTEXT.system_prompt).",
    )
    temperature = models.FloatField(
        null=True,
        blank=True,
        help_text="Sampling temperature of the chat's runs when a prompt names none (null: the default, 0.7).",
    )

    class Meta:
        # The sidebar: one owner's conversations (origin web), most recent activity first.
        indexes = [
            models.Index(fields=["owner", "origin", "-updated_at", "-id"], name="chat_owner_origin_activity"),
            GinIndex(SearchVector("title", config=SEARCH_CONFIG), name="chat_title_search"),
        ]

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


class Moderation(models.TextChoices):
    """What a moderation pass did to a message (``runs.passes``): the strings are part of the API."""

    NONE = "", "none"
    REFUSED = "refused"
    """A prompt the input pass flagged: kept in the chat as sent, never answered, never in a prompt."""
    RETRACTED = "retracted"
    """An answer the output pass stopped (finish reason ``content_filter``): its text withdrawn, never in a prompt."""


class Message(models.Model):
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    content = NulSafeTextField(help_text="Stored with NUL escaped (core.nul_text): any text round-trips.")
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    superseded = models.BooleanField(
        default=False,
        help_text="An earlier version of an answer (regenerated, or continued into a longer one): kept and listed "
        "with the current version, never in a prompt.",
    )
    moderation = models.CharField(
        max_length=16,
        choices=Moderation.choices,
        blank=True,
        default=Moderation.NONE,
        help_text="Refused (a flagged prompt) or retracted (a flagged answer): shown as such, never in a prompt.",
    )

    class Meta:
        indexes = [
            models.Index(fields=["chat", "-created_at", "-id"], name="message_chat_time"),
            GinIndex(SearchVector("content", config=SEARCH_CONFIG), name="message_content_search"),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
