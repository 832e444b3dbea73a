"""The call between a caller of ``deployments.guard.next_token_logprobs`` (the ``guard`` moderation backend, in a web
process) and the generation workers of a deployment: one engine step per prompt, answered with the most likely next
tokens and their log probabilities.

A guard model classifies with its first output token (``safe`` or ``unsafe``), so a check is one prefill and one
sampled token, a few milliseconds of engine time; a ``Run`` (a chat, the dispatcher, a stream) costs rows and round
trips many times that. So, as embeddings do (``generation.embedding_contract``), the caller ``RPUSH``es a request on
its deployment's queue and ``BLPOP``s its own reply key; a worker of that deployment (``inference_workers.
guard_server``) ``BLPOP``s the queue, drains whatever else is waiting, submits every prompt to its engine at once
(continuous batching puts them in the same steps as the runs it is generating) and pushes each request's answer to
its reply key. A request nobody takes before its deadline is dropped by the worker that finds it late (the caller has
answered 503 by then).

The answer per prompt is the engine's ``top_logprobs`` most likely next tokens ``[[token text, logprob], ...]``, most
likely first: vLLM's raw log probabilities (before temperature or penalties), the full distribution's. Which tokens
mean what is the caller's business (``moderation.backends.guard``), so the worker stays a generic scorer.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field

QUEUE_PREFIX = "guard:queue:"
REPLY_PREFIX = "guard:reply:"
REPLY_TTL_S = 60
MAX_PROMPTS = 64
"""The most prompts one request may carry (``/v1/moderations`` sends at most ``MODERATION_MAX_INPUTS``)."""

TokenLogprobs = list[tuple[str, float]]
"""One prompt's answer: ``(token text, logprob)`` pairs, most likely first."""


def guard_queue(deployment: str) -> str:
    """The queue of the deployment ``name@version``: every generation worker of it serves it."""
    return f"{QUEUE_PREFIX}{deployment}"


@dataclass(frozen=True)
class NextTokenRequest:
    prompts: list[str]
    """Each prompt exactly as the engine takes it (the chat template already rendered)."""
    top_logprobs: int
    """How many of the most likely next tokens to answer per prompt (1..20, vLLM's ``max_logprobs``)."""
    deadline: float
    """Unix time after which the caller no longer waits (the worker skips it)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def reply_key(self) -> str:
        return f"{REPLY_PREFIX}{self.id}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> NextTokenRequest:
        data = json.loads(raw)
        return cls(
            prompts=[str(p) for p in data["prompts"]],
            top_logprobs=int(data["top_logprobs"]),
            deadline=float(data["deadline"]),
            id=str(data["id"]),
        )


def reply_json(*, answers: list[TokenLogprobs] | None = None, error: str | None = None) -> str:
    return json.dumps(
        {"answers": [[[t, lp] for t, lp in answer] for answer in answers or []], "error": error}, separators=(",", ":")
    )


def parse_reply(raw: str) -> tuple[list[TokenLogprobs], str | None]:
    """Each prompt's next tokens, and the worker's error (None when it answered every prompt)."""
    data = json.loads(raw)
    answers = [[(str(t), float(lp)) for t, lp in answer] for answer in data.get("answers") or []]
    return answers, data.get("error")
