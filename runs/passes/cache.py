"""The answer cache pass (``answer_cache``, docs/answer-cache.md): after routing, a prompt whose answer is cached
(a paraphrase, in the same partition: the routed deployment, the conversation before it, the sampling) is answered
from the cache through the same run and stream path; a miss goes on to the queue and its answer is stored when the
run finishes with ``stop``.

The key's conversation is read the same way on both sides: before the prompt is written (here, from the caller's
request or from the chat as it is now) and when its run ends (``runs.lifecycle.run_finish``, from the messages
before the run's prompt), so the entry a miss stores is the one the same prompt looks up next time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from accounts.models import User
from answer_cache.eligibility import BypassReason, cache_eligible
from answer_cache.keys import CacheKeyParts
from answer_cache.selectors import cache_policy_cached
from answer_cache.services import CacheLookup, cache_lookup, cache_stash_embedding, cache_store, cache_take_embedding
from chats.context import chat_system_prompt
from chats.models import Chat, Message, MessageRole, Moderation
from deployments.selection import deployment_by_id
from generation.sampling import SamplingSpec
from runs.models import PromptMode, Run
from runs.passes import PassRecord, PromptFacts, PromptPlan, timed
from runs.passes.memory import recalled_digest

logger = logging.getLogger(__name__)

NAME = "cache"
USER_SYSTEM_ROLES = (MessageRole.SYSTEM, MessageRole.DEVELOPER)


@dataclass(frozen=True)
class Conversation:
    """What the answer depends on besides the prompt and the sampling: the system prompt the run starts with and
    the turns before the prompt."""

    system_prompt: str
    history: tuple[tuple[str, str], ...]
    user_system_prompt: bool
    """The system prompt (or a system or developer turn) is the user's own: never shared across users."""
    endpoint: str = "chat"
    temperature: float | None = None
    """The chat's own temperature, when the prompt takes it (``temperature_from_chat``)."""


def api_conversation(
    history: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (), *, raw: bool = False
) -> Conversation:
    """An OpenAI-compatible call's conversation: its messages before the prompt exactly as sent (no system prompt of
    ours is added on ``/v1``); ``raw``: a ``/v1/completions`` prompt (no chat template, no history)."""
    turns = tuple((str(role), str(content)) for role, content in history)
    return Conversation(
        system_prompt="",
        history=turns,
        user_system_prompt=any(role in USER_SYSTEM_ROLES for role, _ in turns),
        endpoint="completions" if raw else "chat",
    )


def _turns(chat_id: int, before_id: int | None) -> tuple[tuple[str, str], ...]:
    rows = Message.objects.filter(chat_id=chat_id, superseded=False, moderation=Moderation.NONE)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    return tuple((str(role), str(content)) for role, content in rows.order_by("id").values_list("role", "content"))


def _chat_conversation(chat: Chat, *, before_id: int | None, raw: bool = False) -> Conversation:
    turns = () if raw else _turns(chat.pk, before_id)
    return Conversation(
        system_prompt="" if raw else chat_system_prompt(chat_prompt=chat.system_prompt, origin=chat.origin),
        history=turns,
        user_system_prompt=bool(chat.system_prompt.strip()) or any(role in USER_SYSTEM_ROLES for role, _ in turns),
        endpoint="completions" if raw else "chat",
        temperature=chat.temperature,
    )


ConversationReader = Callable[[Callable[[float | None], bool]], "Conversation | None"]
"""Reads a prompt's conversation for the cache, given ``accept``: whether a prompt at the chat's own temperature
(None: it has none) may be cached at all; None when it may not (nothing more is read) or there is no such chat."""


class _Unknown:
    pass


UNKNOWN = _Unknown()
"""The chat's temperature was not read by the caller."""


def chat_conversation_reader(
    *, chat_id: int, user: User, temperature: float | _Unknown | None = UNKNOWN, exists: bool = True
) -> ConversationReader:
    """The conversation of the user's chat ``chat_id`` as it is now (the prompt not written yet): one indexed read of
    the chat and one of its messages, only when ``accept`` lets the prompt be cached (asked first with the chat's
    ``temperature`` when the caller read it: a prompt that cannot be cached then costs no read). None: not the user's
    chat (the 404 follows; ``exists`` False: the caller found none), or not cacheable."""

    def read(accept: Callable[[float | None], bool]) -> Conversation | None:
        # Unknown: asked first as if the chat had no temperature of its own; a prompt that cannot be cached so is
        # not read for (at worst a chat set to temperature 0 misses the cache: never a wrong answer).
        if not exists or not accept(None if isinstance(temperature, _Unknown) else temperature):
            return None
        chat = Chat.objects.filter(pk=chat_id, owner=user).first() if 0 < chat_id < 2**63 else None
        if chat is None or not accept(chat.temperature):
            return None
        return _chat_conversation(chat, before_id=None)

    return read


def fixed_conversation(conversation: Conversation) -> ConversationReader:
    """A reader of a conversation the caller holds (an API call's messages)."""
    return lambda accept: conversation


def run_key_parts(run: Run) -> CacheKeyParts:
    """The key of a finished run's prompt, as the pass built it before the run was written."""
    conversation = _chat_conversation(run.chat, before_id=run.user_message_id, raw=run.prompt_mode == PromptMode.RAW)
    spec = SamplingSpec.from_json(run.sampling or {}, temperature=run.temperature, top_p=run.top_p)
    return _parts(
        spec=spec,
        deployment_id=run.deployment_id or 0,
        deployment_key=_key(run),
        conversation=conversation,
        tools=run.tools,
        context_digest=recalled_digest(run),
    )


def _key(run: Run) -> str:
    """The run's ``name@version`` from the process's deployments snapshot (its finish reads no deployment row), or
    its model when it has no deployment."""
    served = deployment_by_id(run.deployment_id)
    return served.key if served is not None else run.model


def _parts(
    *,
    spec: SamplingSpec,
    deployment_id: int,
    deployment_key: str,
    conversation: Conversation,
    tools: object,
    n: int = 1,
    context_digest: str = "",
) -> CacheKeyParts:
    return CacheKeyParts(
        deployment_id=deployment_id,
        deployment_key=deployment_key,
        sampling=spec,
        n=n,
        system_prompt=conversation.system_prompt,
        history=conversation.history,
        tools=tools or None,
        endpoint=conversation.endpoint,
        user_system_prompt=conversation.user_system_prompt,
        user_context=bool(context_digest),
        context_digest=context_digest,
    )


NO_CONVERSATION = Conversation(system_prompt="", history=(), user_system_prompt=False)


@dataclass(frozen=True)
class CachePlan:
    """The pass's lookup, kept on the prompt's plan: a hit answers the run; a miss's embedding waits for its end."""

    lookup: CacheLookup

    @property
    def hit(self) -> bool:
        return self.lookup.hit is not None


class AnswerCache:
    name = NAME

    def __call__(self, facts: PromptFacts, plan: PromptPlan) -> PassRecord | None:
        if facts.conversation is None or not settings.ANSWER_CACHE.enabled:
            return None  # a revision wants a new answer; the cache switched off answers nothing
        policy = cache_policy_cached(tier=facts.tier)
        if not policy.enabled:
            return None
        started = time.perf_counter()

        def effective(temperature: float | None) -> SamplingSpec:
            if temperature is not None and facts.temperature_from_chat:
                return dataclasses.replace(facts.spec, temperature=temperature)
            return facts.spec

        def bypass(temperature: float | None) -> BypassReason | None:  # what the prompt alone says, before history
            parts = _parts(
                spec=effective(temperature),
                deployment_id=0,
                deployment_key="",
                conversation=NO_CONVERSATION,
                tools=facts.tools,
                n=facts.n,
            )
            return cache_eligible(policy=policy, parts=parts, prompt=facts.content)

        reason = None if facts.temperature_from_chat else bypass(None)
        conversation = facts.conversation(lambda t: bypass(t) is None) if reason is None else None
        if conversation is None:
            reason = reason or bypass(facts.spec.temperature)
            if reason is None:  # not the user's chat: the 404 follows
                return None
            return timed(NAME, started, "bypass", reason=str(reason))
        spec = effective(conversation.temperature)
        recall = plan.memory
        parts = _parts(
            spec=spec,
            deployment_id=plan.served.id,
            deployment_key=plan.served.key,
            conversation=conversation,
            tools=facts.tools,
            n=facts.n,
            context_digest=recall.digest if recall is not None else "",
        )
        lookup = cache_lookup(
            user_id=facts.user.pk,
            tier=facts.tier,
            parts=parts,
            prompt=facts.content,
            policy=policy,
            embedded=recall.embedded if recall is not None else None,
        )
        hit = lookup.hit
        if hit is not None and facts.max_tokens and hit.output_tokens > facts.max_tokens:
            lookup = dataclasses.replace(lookup, hit=None)  # longer than this prompt allows: generate it
        plan.cache = CachePlan(lookup=lookup)
        if lookup.bypass is not None:
            return timed(NAME, started, "bypass", reason=str(lookup.bypass))
        detail: dict[str, object] = {"embed_ms": round(lookup.embed_ms, 3), "lookup_ms": round(lookup.lookup_ms, 3)}
        if lookup.hit is None:
            return timed(NAME, started, "miss", **detail)
        found = lookup.hit
        detail.update(
            entry=found.entry_id,
            similarity=round(found.similarity, 4),
            source=str(found.source),
            source_run=found.source_run_id,
            saved_input_tokens=found.input_tokens,
            saved_output_tokens=found.output_tokens,
        )
        return timed(NAME, started, "hit", **detail)


def cache_after_create(*, run: Run, plan: PromptPlan) -> None:
    """After the run is written: a miss's embedding waits in Redis for the run's end (the worker stores the answer
    without embedding the prompt again)."""
    if plan.cache is not None and not plan.cache.hit:
        cache_stash_embedding(run_id=run.pk, lookup=plan.cache.lookup)


def cache_after_finish(*, run: Run) -> None:
    """At a run's end (after commit): its answer is stored when its prompt missed, it finished with ``stop`` and the
    caller did not ask for it not to be kept (``store: false``)."""
    if not run.store or not any(p.get("pass") == NAME and p.get("decision") == "miss" for p in run.passes):
        return  # OpenAI's `store: false`: the caller asked that its answer not be kept
    message = run.assistant_message
    if message is None or run.user_message is None:
        return
    stashed = cache_take_embedding(run_id=run.pk)
    vector, model = stashed if stashed is not None else (None, "")
    cache_store(
        user_id=run.user_id,
        tier=run.tier,
        parts=run_key_parts(run),
        prompt=run.user_message.content,
        answer=message.content,
        finish_reason=run.finish_reason,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        embedding=vector,
        embedding_model=model,
        source_run_id=run.pk,
    )
