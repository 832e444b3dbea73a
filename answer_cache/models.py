"""The answer cache's rows: a tier's :class:`CachePolicy` and the cached answers, :class:`CacheEntry`.

Postgres is the system of record: an entry exists while its row does. The vector index each web process holds
(``answer_cache.index``) is derived from these rows and may lag them; a hit is always checked against its row.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from accounts.models import Tier
from deployments.models import ModelDeployment

DEFAULT_THRESHOLD = 0.9
"""The similarity (cosine, all-MiniLM-L6-v2) above which a prompt is answered from the cache: chosen on the labelled
pairs of ``bench/answer_cache/pairs.jsonl`` (docs/answer-cache.md, "Hit rate and false hits")."""
DEFAULT_TTL_S = 86_400


class CacheSource(models.TextChoices):
    """Whose entry answered: the user's own, or one shared in the tier's scope."""

    OWN = "own"
    SHARED = "shared"


class CachePolicy(models.Model):
    """A tier's answer-cache settings (one per tier; a tier without a row gets the defaults below)."""

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="cache_policy")
    enabled = models.BooleanField(default=True, help_text="Answer this tier's eligible prompts from the cache.")
    shared_scope = models.BooleanField(
        default=False,
        help_text="Share entries among this tier's users, for prompts with no history and no per-user context (no "
        "system prompt of the user's own, no memory). Off: every entry is seen only by its own user.",
    )
    threshold = models.FloatField(
        default=DEFAULT_THRESHOLD,
        validators=[MinValueValidator(0.5), MaxValueValidator(1.0)],
        help_text="Cosine similarity (0.5-1) from which a cached prompt counts as the same question.",
    )
    ttl_s = models.PositiveIntegerField(
        default=DEFAULT_TTL_S,
        validators=[MinValueValidator(1)],
        help_text="Seconds an entry is served after it is stored.",
    )
    allow_sampled = models.BooleanField(
        default=False,
        help_text="Also cache prompts sampled at a temperature above 0 (a cached answer is then one sample, served "
        "again). Seeded prompts are never cached.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "cache policies"

    def __str__(self) -> str:
        return f"Answer cache of {self.tier.name}"


class CacheEntry(models.Model):
    """One cached answer: the prompt it answered, under its partition and scope, and the prompt's embedding."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cache_entries", help_text="Who asked."
    )
    scope = models.CharField(
        max_length=40, help_text="Who may be served it: 'user:<id>' (its own user) or 'tier:<id>' (shared)."
    )
    partition = models.CharField(
        max_length=64, help_text="SHA-256 of everything besides the prompt's meaning that decides the answer."
    )
    deployment = models.ForeignKey(ModelDeployment, on_delete=models.CASCADE, related_name="cache_entries")
    deployment_key = models.CharField(max_length=201, help_text="The answering deployment's name@version.")
    embedding_model = models.CharField(max_length=201, help_text="The embedding deployment's name@version.")
    prompt = models.TextField()
    answer = models.TextField()
    input_tokens = models.PositiveIntegerField(default=0, help_text="The original run's prompt tokens.")
    output_tokens = models.PositiveIntegerField(default=0, help_text="The original run's answer tokens.")
    embedding = models.BinaryField(help_text="The prompt's embedding: little-endian float32, unit length.")
    source_run_id = models.BigIntegerField(null=True, blank=True, help_text="The run whose answer this is.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    hits = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "cache entries"
        indexes = [models.Index(fields=["scope", "partition"], name="cache_entry_scope_partition")]

    def __str__(self) -> str:
        return f"Cache entry {self.pk} ({self.scope}, {self.deployment_key})"

    @property
    def shared(self) -> bool:
        return self.scope.startswith("tier:")
