"""Whether a prompt may be answered from (and stored in) the cache: :func:`cache_eligible`.

The cache serves the answer a prompt already got. That is right only when the same request would give the same
answer, or when the tier accepted one sample standing for another: anything that asks for a particular or several
samples, for per-token data, or for actions (tools) bypasses it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from answer_cache.keys import CacheKeyParts
from answer_cache.models import CachePolicy


class BypassReason(models.TextChoices):
    """Why a prompt did not go through the cache (recorded on the run; the strings are part of its record)."""

    DISABLED = "disabled"
    """The cache is off (``ANSWER_CACHE_ENABLED``) or the tier's policy is."""
    SEEDED = "seeded"
    """A ``seed`` asks for one particular sample."""
    MULTIPLE_CHOICES = "multiple_choices"
    """``n`` > 1 asks for several different samples."""
    TOOLS = "tools"
    """Tools may act on the world or on fresh data: never answered from a cache."""
    SAMPLED = "sampled"
    """A temperature above 0 without the tier's ``allow_sampled`` opt-in."""
    LOGPROBS = "logprobs"
    """Log probabilities belong to a generation the cache did not run."""
    EMPTY_PROMPT = "empty_prompt"
    EMBEDDING_UNAVAILABLE = "embedding_unavailable"
    """The embedding deployment did not answer in time (``ANSWER_CACHE_EMBED_TIMEOUT_S``): the prompt goes on."""


def cache_eligible(*, policy: CachePolicy, parts: CacheKeyParts, prompt: str) -> BypassReason | None:
    """The reason this prompt bypasses the cache, or None when it may be looked up and its answer stored."""
    if not settings.ANSWER_CACHE.enabled or not policy.enabled:
        return BypassReason.DISABLED
    if not prompt.strip():
        return BypassReason.EMPTY_PROMPT
    sampling = parts.sampling
    if sampling.seed is not None:
        return BypassReason.SEEDED
    if parts.n > 1:
        return BypassReason.MULTIPLE_CHOICES
    if parts.tools:
        return BypassReason.TOOLS
    if sampling.logprobs is not None:
        return BypassReason.LOGPROBS
    if sampling.temperature > 0 and not policy.allow_sampled:
        return BypassReason.SAMPLED
    return None
