"""Passes around a run: the one place where what runs before a prompt is queued, and on its stream, is decided.

**Before the queue** (:func:`runs.passes.pipeline.prompt_passes`, once per prompt, before anything is counted,
charged or written):

1. ``moderate_input``: the tier's moderation policy (``moderation``) checks the prompt; a flagged one is refused
   (:class:`PromptRefused`, 400 ``content_policy_violation``): nothing is queued or charged, and the caller keeps the
   prompt as a refused message (``runs.services``) or, on ``/v1``, as the violation's record.
2. ``route``: ``model: "auto"`` (or a tier whose default is ``auto``) goes through the router (``model_routing``),
   which picks the deployment; a pinned ``name`` or ``name@version`` is never rerouted.
3. ``memory``: for a user who turned memory on (``memory``), the memories from their other chats that are relevant
   to the prompt are recalled (the worker puts them into the prompt), and the prompt is kept as a memory.
4. ``cache``: the semantic answer cache (``answer_cache``), keyed by the routed deployment and the memories
   recalled (it reuses the prompt's embedding when memory embedded it with the same model).

The order is fixed here, because each pass needs the one before it: a refused prompt must never be routed,
remembered or looked up, and the cache's key names the deployment the router picked and what memory added.
Each pass is configured per tier by its own app's policy (the admin edits them); a pass that does not apply to a
prompt records nothing.

**On the stream**: ``moderate_output``, in the worker (``inference_workers.output_moderation``), per the tier's
policy: hold back a window of tokens and check it before each flush, or flush at once, check behind and retract.

Every pass's decision is a :class:`PassRecord` (its name, its decision, what it cost in ms, its scores); the run
stores them in ``Run.passes``, so the admin and the API show why a run went where it went.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from accounts.models import Tier, User
from core.errors import DomainError
from deployments.selection import Served
from generation.sampling import SamplingSpec


@dataclass(frozen=True)
class PassRecord:
    """One pass's decision about one prompt (or one stream), as the run stores it."""

    name: str
    decision: str
    ms: float
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"pass": self.name, "decision": self.decision, "ms": round(self.ms, 3), **self.detail}


@dataclass(frozen=True)
class PromptFacts:
    """What the passes see of a prompt before it is queued."""

    user: User
    tier: Tier
    """The tier it is scheduled on (``service_tier``), whose policies apply."""
    content: str
    served: Served
    """As the request resolved it: ``served.auto`` when it named ``model: "auto"``, ``served.defaulted`` when it
    named no model (a tier whose default is ``auto`` routes it); a pinned ``name`` or ``name@version`` neither."""
    max_tokens: int
    """The client's own ``max_tokens`` (0: none asked; the tier's default then applies, which says nothing about the
    answer's expected length)."""
    has_tools: bool = False
    structured: bool = False
    count_tokens: Callable[[str], int] = len
    """The served deployment's tokenizer (the router's prompt length)."""
    history_tokens: int = 0
    """The tokens of the conversation before the prompt, where the caller holds it (an API call's messages); a
    UI chat's history is not read here (it would cost a query per prompt): the router sees its new message."""
    spec: SamplingSpec = field(default_factory=SamplingSpec)
    """The sampling asked for (the cache's key; seeded, sampled or logprobs prompts bypass it)."""
    temperature_from_chat: bool = False
    """The prompt named no temperature: the chat's applies (the conversation says which)."""
    n: int = 1
    tools: list[dict[str, object]] | None = None
    conversation: Callable[[Callable[[float | None], bool]], Any] | None = None
    """Reads the system prompt and the turns before the prompt when the cache needs them
    (``runs.passes.cache.ConversationReader``); None: the prompt is not answered from the cache (a revision asks for
    a new answer)."""
    chat_id: int | None = None
    """The chat of ``/api/chats`` the prompt is posted to (memory recalls from the user's other chats, and keeps the
    prompt); None: an OpenAI-compatible call (stateless: no memory) or a revision."""


@dataclass
class PromptPlan:
    """What the passes decided: the deployment to queue on, and each pass's record, in order."""

    served: Served
    records: list[PassRecord] = field(default_factory=list)
    cache: Any = None
    """The cache pass's lookup (``runs.passes.cache.CachePlan``): a hit answers the run, a miss stores its answer."""
    memory: Any = None
    """The memory pass's recall (``memory.services.Recall``): the memories the prompt carries, and its embedding
    (kept as a memory once the prompt is written)."""

    def records_json(self) -> list[dict[str, Any]]:
        return [record.to_json() for record in self.records]


class PromptRefused(DomainError):
    """The input moderation pass flagged the prompt: a 400 in OpenAI's words, with nothing queued or charged."""

    status_code = 400
    code = "content_policy_violation"

    def __init__(self, message: str, *, record: PassRecord, verdict: Any) -> None:
        super().__init__(message, extra={"moderation": dict(record.detail)})
        self.record = record
        self.verdict = verdict


class PromptPass(Protocol):
    """One pass before the queue: records its decision, may replace ``plan.served`` or raise a ``DomainError``."""

    name: str

    def __call__(self, facts: PromptFacts, plan: PromptPlan) -> PassRecord | None: ...


def timed(name: str, started: float, decision: str, **detail: Any) -> PassRecord:
    """A record of ``name``'s decision, its cost counted from ``started`` (``time.perf_counter()``)."""
    return PassRecord(name=name, decision=decision, ms=(time.perf_counter() - started) * 1000, detail=detail)
