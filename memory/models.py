"""Memory's rows: a tier's :class:`MemoryPolicy` and the memories (a user's opt-in is ``accounts.User.memory_enabled``,
read with the user at no cost).

Postgres is the system of record: a memory exists while its row does. Each web process's vector index
(``memory.index``) is derived from these rows and may lag them; a recalled memory is always checked against its row.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from accounts.models import Tier
from chats.models import Chat, Message

DEFAULT_TOP_K = 3
DEFAULT_MIN_SIMILARITY = 0.45
"""Cosine (all-MiniLM-L6-v2) from which a memory counts as relevant to a prompt: chosen on the labelled facts and
questions of ``bench/memory/recall.jsonl`` (docs/memory.md, "Precision")."""
DEFAULT_MAX_TOKENS = 200
MAX_MEMORY_CHARS = 2000
"""A memory's text is cut to this (a long prompt is kept by its start)."""


class MemoryPolicy(models.Model):
    """A tier's memory settings (one per tier; a tier without a row gets the defaults below)."""

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="memory_policy")
    enabled = models.BooleanField(
        default=True,
        help_text="Let this tier's users turn memory on. Off: nothing is kept or recalled for them (their memories "
        "stay, and they can still see and delete them).",
    )
    top_k = models.PositiveSmallIntegerField(
        default=DEFAULT_TOP_K,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="At most this many memories go into a prompt.",
    )
    min_similarity = models.FloatField(
        default=DEFAULT_MIN_SIMILARITY,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Cosine similarity (0-1) from which a memory is relevant to a prompt.",
    )
    max_tokens = models.PositiveIntegerField(
        default=DEFAULT_MAX_TOKENS,
        validators=[MinValueValidator(16)],
        help_text="At most this many tokens of memories go into a prompt (the most similar first).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "memory policies"

    def __str__(self) -> str:
        return f"Memory of {self.tier.name}"


class Memory(models.Model):
    """One thing a user said (a prompt of theirs, or a note they added), with its embedding."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories")
    chat = models.ForeignKey(
        Chat,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="memories",
        help_text="The chat it was said in (deleting the chat deletes it); empty: added by the user.",
    )
    message = models.OneToOneField(
        Message, on_delete=models.CASCADE, null=True, blank=True, related_name="memory", help_text="The prompt it is."
    )
    content = models.TextField()
    embedding = models.BinaryField(help_text="The content's embedding: little-endian float32, unit length.")
    embedding_model = models.CharField(max_length=201, help_text="The embedding deployment's name@version.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name_plural = "memories"
        indexes = [models.Index(fields=["user", "-id"], name="memory_user_newest")]

    def __str__(self) -> str:
        return f"Memory {self.pk} of {self.user_id}"
