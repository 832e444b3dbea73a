"""A prompt's cache key besides its meaning: :class:`CacheKeyParts` (the caller fills it) and its partition digest.

Two prompts can share an answer only inside one **partition**: the same deployment version, the same system prompt
and history before the prompt, the same sampling parameters and output constraint, the same tools and the same
embedding model. Inside a partition the prompts' embeddings decide (``answer_cache.index``). The digest is SHA-256
over a canonical JSON document of those parts, so two processes (or two releases with the same ``KEY_VERSION``)
agree on it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from generation.sampling import SamplingSpec

KEY_VERSION = 1
"""Bumped whenever what goes into the digest changes: older entries then stop matching (and expire by TTL)."""


@dataclass(frozen=True)
class CacheKeyParts:
    """Everything about a prompt that decides its answer, apart from the prompt text itself.

    The caller (the run's pass) fills it from the request as the engine will see it: ``sampling`` the effective
    spec (temperature included), ``system_prompt`` the system text the prompt is built with, ``history`` the turns
    before the new prompt as ``(role, content)`` pairs.
    """

    deployment_id: int
    """The answering deployment's id (entries are deleted with it, and purged when it is retired)."""
    deployment_key: str
    """Its ``name@version``: a new version never serves an older one's answers."""
    sampling: SamplingSpec
    """The effective sampling parameters, including ``structured_outputs`` and ``constraint`` (the output
    constraint) and ``seed`` / ``logprobs`` (which bypass the cache)."""
    max_tokens: int | None = None
    n: int = 1
    """Choices asked for; more than one bypasses the cache."""
    system_prompt: str = ""
    history: tuple[tuple[str, str], ...] = ()
    """The turns before the prompt, oldest first (a rolling summary counts as a turn)."""
    tools: Any = None
    """The tools offered and ``tool_choice`` (JSON), or None; any tool bypasses the cache."""
    endpoint: str = "chat"
    """What turns the prompt into the engine's input: ``chat`` (a chat template) or ``completions`` (raw text)."""
    user_system_prompt: bool = False
    """The system prompt is the user's own (a chat setting, a ``system`` message of theirs), not the deployment's:
    such a prompt is never shared across users."""
    user_context: bool = False
    """Per-user context went into the prompt (memories, custom instructions): never shared across users."""
    context_digest: str = ""
    """A digest of that context (the memories recalled into the prompt: ``memory.services.Recall.digest``): two
    prompts with different memories in them never share an answer."""

    @property
    def shareable(self) -> bool:
        """Whether an entry for this prompt may be seen by other users of a tier that opted in: no history and
        nothing of the user's own in the prompt besides the prompt."""
        return not self.history and not self.user_system_prompt and not self.user_context


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def partition_digest(parts: CacheKeyParts, *, embedding_model: str) -> str:
    """The exact-match part of the key: SHA-256 (hex) of the deployment, system prompt and history digests,
    sampling, output constraint, tools, endpoint and ``embedding_model`` (vectors of two models never compare)."""
    sampling = parts.sampling.to_json()
    sampling["temperature"] = parts.sampling.temperature
    sampling["top_p"] = parts.sampling.top_p
    document = {
        "v": KEY_VERSION,
        "deployment": parts.deployment_key,
        "embedding_model": embedding_model,
        "endpoint": parts.endpoint,
        "system": _digest(parts.system_prompt),
        "history": _digest([list(turn) for turn in parts.history]),
        "sampling": sampling,
        "max_tokens": parts.max_tokens,
        "n": parts.n,
        "tools": parts.tools,
    }
    if parts.context_digest:  # only when there is one: the keys of prompts without context stay as they were
        document["context"] = parts.context_digest
    return _digest(document)


def own_scope(user_id: int) -> str:
    """The scope of a user's private entries."""
    return f"user:{user_id}"


def shared_scope(tier_id: int) -> str:
    """The scope a tier's users share (only when the tier opted in): entries never cross tiers either."""
    return f"tier:{tier_id}"
