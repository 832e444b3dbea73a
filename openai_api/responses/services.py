"""Writes of ``/v1/responses``: a call is one API chat and one run, like a chat completion of one choice
(``openai_api.services``), with a :class:`ResponseRecord` beside the run.

- The chat starts with a system message holding ``instructions`` when they are given; the server's default system
  prompt is never added (an API chat gets none, ``chats.context.chat_system_prompt``): the model sees the caller's
  instructions and messages only, as vLLM's server renders them.
- ``previous_response_id``: the continued response's conversation is copied into the new chat (its messages before
  its answer, without its instructions, which OpenAI does not carry over, but with the system and developer
  messages of its input), then its output as the assistant turn,
  then the new input. A copy rather than a shared chat, so two responses may continue the same one.
- ``truncation: "disabled"`` (OpenAI's default): a conversation that does not fit the context window whole is a 400
  (the prompt planner would otherwise drop the oldest turns, which is what ``"auto"`` asks for).

- ``service_tier`` and ``prompt_cache_key`` mean what they mean on chat completions (``openai_api.service_tier``,
  ``runs.selectors.prompt_cache_key_worker``), and the tier's cap on the messages one call writes
  (``Tier.max_request_messages``) counts the continued conversation's turns too: each call copies them.

Everything is written in one transaction: a refused call leaves no row behind.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.limits import user_limits
from accounts.models import User
from chats.context import prompt_budget, rendered_token_count
from chats.models import Chat, ChatOrigin, Message, MessageRole
from chats.services import title_from_text
from core.errors import DomainError
from deployments.selection import Served
from deployments.tokenizer import count_tokens
from openai_api.responses.formats import ID_PREFIX
from openai_api.responses.models import ResponseRecord
from openai_api.responses.requests import ResponseRequest
from openai_api.service_tier import service_tier_for
from openai_api.services import check_message_count
from openai_api.tools.prompt import history_with_tools
from runs.models import PromptMode
from runs.passes.cache import api_conversation
from runs.selectors import prompt_cache_key_worker
from runs.services import SamplingRequest, chat_delete, prompt_plan, run_create


def new_response_id() -> str:
    return ID_PREFIX + secrets.token_hex(24)


def input_items_of(public_id: str, value: str | list[Any]) -> list[dict[str, Any]]:
    """The input as items (a string is one user message), each with an id (its own, or one derived here)."""
    suffix = public_id.removeprefix(ID_PREFIX)[:40]
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    items: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        kind = item.get("type", "message")
        prefix = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}.get(kind, "item")
        items.append({"id": f"{prefix}_{suffix}{index:04x}", **item, "type": kind})
    return items


def _leads_with_ours(previous: ResponseRecord) -> bool:
    """Whether the continued chat's first message is the call's own, not the caller's input: its ``instructions``,
    or the tools' listing (``history_with_tools``, which joins a leading system message of the input when there are
    no instructions: that one goes with it). The input's other system and developer messages are carried over."""
    asked = previous.request
    return asked.get("instructions") is not None or bool(asked.get("tools"))


def _conversation(previous: ResponseRecord | None, request: ResponseRequest) -> list[tuple[str, str, int | None]]:
    """``(role, content, token_count)`` of the turns before the new message: the instructions (a system message),
    the continued chat's turns (their counts known), then this request's history (counted here); with the tools'
    listing where the served model's template renders none (``openai_api.tools.prompt``)."""
    turns: list[tuple[str, str, int | None]] = []
    if request.instructions is not None:
        turns.append((MessageRole.SYSTEM, request.instructions, None))
    if previous is not None:
        run = previous.run
        rows = list(
            Message.objects.filter(chat_id=run.chat_id, id__lte=run.user_message_id, superseded=False)
            .order_by("id")
            .values_list("role", "content", "token_count")
        )
        if rows and rows[0][0] == MessageRole.SYSTEM and _leads_with_ours(previous):
            rows = rows[1:]  # its instructions (or the tools' listing), which are not carried over
        turns.extend((role, content, tokens) for role, content, tokens in rows)
    turns.extend((role, content, None) for role, content in request.conversation)
    pairs = [(role, content) for role, content, _ in turns]
    listed = history_with_tools(pairs, request.chat.tools)
    if len(listed) > len(pairs):
        return [(*listed[0], None), *turns]
    if listed and listed[0] != pairs[0]:
        return [(*listed[0], None), *turns[1:]]
    return turns


def _check_fits(*, user: User, request: ResponseRequest, turns: list[tuple[str, str, int | None]]) -> None:
    """``truncation: "disabled"``: the whole conversation must fit the prompt budget, else a 400 (OpenAI's)."""
    limits = user_limits(user=user)
    asked = request.chat.sampling.max_tokens
    max_tokens = asked if asked is not None else min(settings.CHAT_LIMITS.default_max_tokens, limits.max_output_tokens)
    budget = prompt_budget(
        context_limit_tokens=user.tier.context_limit_tokens,
        max_model_len=settings.ENGINE.max_model_len,
        max_tokens=max_tokens,
    )
    messages = [{"role": role, "content": content} for role, content, _ in turns]
    messages.append({"role": request.chat.last_role, "content": request.chat.prompt})
    tokens = rendered_token_count(messages)
    if tokens > budget:
        raise DomainError(
            f"Your input is {tokens} tokens; at most {budget} fit with a {max_tokens}-token answer. Shorten the input, "
            "ask for fewer max_output_tokens, or set truncation to 'auto' to drop the oldest turns.",
            code="context_length_exceeded",
        )


def response_create(
    *, user: User, request: ResponseRequest, deployment: Served, previous: ResponseRecord | None = None
) -> ResponseRecord:
    """The call's record and its queued run on ``deployment``; ``previous``: the record ``previous_response_id``
    names (the caller's own, stored and done: see ``apis``)."""
    chat_request = request.chat
    sampling = chat_request.sampling
    turns = _conversation(previous, request)
    check_message_count(tier=user.tier, count=len(turns) + 1, param="input")  # the turns, then the run's message
    if request.truncation == "disabled":
        _check_fits(user=user, request=request, turns=turns)
    tier = service_tier_for(user=user, requested=request.service_tier)
    worker = prompt_cache_key_worker(user=user, prompt_cache_key=request.prompt_cache_key)
    plan = prompt_plan(  # a refusal writes nothing of the call's
        user=user,
        tier=tier,
        content=chat_request.prompt,
        served=deployment,
        max_tokens=sampling.max_tokens,
        tools=chat_request.tools.tools or None,
        spec=sampling.spec,
        conversation=api_conversation([(role, content) for role, content, _ in turns]),
    )
    with transaction.atomic():
        chat = Chat.objects.create(
            owner=user, title=title_from_text(chat_request.prompt), origin=ChatOrigin.API, last_worker=worker
        )
        Message.objects.bulk_create(  # in order: ids follow the conversation
            Message(chat=chat, role=role, content=content, token_count=count_tokens(content) if n is None else n)
            for role, content, n in turns
        )
        run = run_create(
            chat_id=chat.pk,
            user=user,
            content=chat_request.prompt,
            sampling=SamplingRequest(max_tokens=sampling.max_tokens, spec=sampling.spec),
            system_prompt="",  # the fit check counts no system prompt of ours: none is added on /v1
            prompt_mode=PromptMode.CONTINUE if chat_request.continue_final else PromptMode.CHAT,
            tools=chat_request.tools.tools or None,
            end_user=chat_request.end_user,
            prompt_role=MessageRole(chat_request.last_role),
            deployment=deployment,
            service_tier=tier,
            metadata=request.metadata,
            store=request.store,
            prompt_cache_key=request.prompt_cache_key,
            plan=plan,
        )
        public_id = new_response_id()
        record = ResponseRecord.objects.create(
            public_id=public_id, run=run, request=request.echo, input_items=input_items_of(public_id, request.input)
        )
    return record


def response_delete(*, record: ResponseRecord) -> None:
    """Deletes the response: its chat, run and record (an unfinished run is cancelled first)."""
    chat_delete(chat=record.run.chat)
