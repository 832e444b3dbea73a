"""One OpenAI-compatible call = one chat (origin ``api``) and one run per choice.

A choice is an ordinary run created by ``run_create``, like a prompt from the chat UI: the same admission
(token bucket, concurrency cap, queue depth: 429 with ``Retry-After``), tier caps, fair scheduling, workers
and stream. ``n`` > 1 (and each string of a ``/v1/completions`` prompt list) is one run per choice, each in a
chat of its own holding the call's messages, so each choice streams, is charged, and counts against the
tier's concurrency cap like any prompt. With a ``seed``, choice ``i`` samples with ``seed + i``: the call
repeats for a repeated seed, and its choices differ.

Everything is written in one transaction, so a refused or invalid call leaves no row behind (a reservation
already made for an earlier choice is reclaimed by the admission's pending expiry). A call of one choice and one
message (no earlier turns) is one statement: its chat, its message and its run (``runs.prompt_insert``).
"""

from __future__ import annotations

from django.db import transaction

from accounts.models import Tier, User
from chats.models import Chat, ChatOrigin, Message, MessageRole
from chats.services import title_from_text
from deployments.selection import Served
from deployments.tokenizer import count_tokens
from generation.sampling import SamplingSpec
from openai_api.errors import OpenAIRequestError
from openai_api.requests import ChatCompletionRequest, CompletionRequest
from openai_api.service_tier import service_tier_for
from openai_api.tools.prompt import history_with_tools
from runs.models import PromptMode, Run
from runs.passes.cache import api_conversation
from runs.selectors import prompt_cache_key_worker
from runs.services import SamplingRequest, prompt_plan, run_cancel, run_create


def _choice_spec(spec: SamplingSpec, index: int) -> SamplingSpec:
    return spec if index == 0 or spec.seed is None else spec.with_seed(spec.seed + index)


def check_message_count(*, tier: Tier, count: int, param: str = "messages") -> None:
    """A call that would write more than ``tier.max_request_messages`` messages is a 400 before anything is written
    (chat completions: its ``messages``; responses: its input items with the conversation it continues)."""
    limit = tier.max_request_messages
    if count > limit:
        raise OpenAIRequestError(
            f"'{param}' holds {count} messages; at most {limit} are allowed in one call on the {tier.name} tier.",
            param=param,
            code="too_many_messages",
        )


def chat_completion_create(*, user: User, request: ChatCompletionRequest, deployment: Served) -> list[Run]:
    """The call's runs, choice ``i`` at index ``i``, all on ``deployment`` (resolved from ``model``).

    Each choice's chat holds the call's messages exactly as sent, in order (system and developer ones where the
    client put them), then the run's last message; no default system prompt is added (``chats.context``). More
    messages than the user's tier allows is a 400 before anything is written."""
    check_message_count(tier=user.tier, count=request.message_count)
    options = request.options
    tier = service_tier_for(user=user, requested=options.service_tier)
    worker = prompt_cache_key_worker(user=user, prompt_cache_key=options.prompt_cache_key)
    sampling = request.sampling
    history = history_with_tools(request.history, request.tools)  # the tools' listing, where the template has none
    history_tokens = [count_tokens(content) for _, content in history]
    plan = prompt_plan(  # once for all the choices: a refusal writes nothing of the call's
        user=user,
        tier=tier,
        content=request.prompt,
        served=deployment,
        max_tokens=sampling.max_tokens,
        tools=request.tools.tools or None,
        spec=sampling.spec,
        history_tokens=sum(history_tokens),
        conversation=api_conversation(history),
        n=sampling.n,
    )

    def choice(index: int, chat: Chat) -> Run:
        return run_create(
            chat_id=chat.pk,  # None: a chat not yet written, which the prompt's statement writes
            new_chat=chat if chat.pk is None else None,
            user=user,
            content=request.prompt,
            sampling=SamplingRequest(max_tokens=sampling.max_tokens, spec=_choice_spec(sampling.spec, index)),
            system_prompt="",  # the fit check counts no system prompt of ours: none is added
            prompt_mode=PromptMode.CONTINUE if request.continue_final else PromptMode.CHAT,
            tools=request.tools.tools or None,
            end_user=request.end_user,
            prompt_role=MessageRole(request.last_role),
            deployment=deployment,
            service_tier=tier,
            metadata=options.metadata,
            store=options.store,
            prompt_cache_key=options.prompt_cache_key,
            plan=plan,
        )

    def new_chat() -> Chat:
        return Chat(owner=user, title=title_from_text(request.prompt), origin=ChatOrigin.API, last_worker=worker)

    if sampling.n == 1 and not history:  # the chat, its prompt and the run: one statement, atomic on its own
        return [choice(0, new_chat())]
    runs: list[Run] = []
    with transaction.atomic():
        for index in range(sampling.n):
            chat = new_chat()
            chat.save()
            Message.objects.bulk_create(  # in order: ids follow the conversation
                Message(chat=chat, role=role, content=content, token_count=tokens)
                for (role, content), tokens in zip(history, history_tokens, strict=True)
            )
            runs.append(choice(index, chat))
    return runs


def text_completion_create(*, user: User, request: CompletionRequest, deployment: Served) -> list[Run]:
    """The call's runs: prompt ``p``'s choice ``j`` at index ``p * n + j`` (vLLM's order), on ``deployment``."""
    sampling = request.sampling
    plans = [  # each prompt's passes once, before anything is written
        prompt_plan(
            user=user,
            tier=user.tier,
            content=prompt,
            served=deployment,
            max_tokens=sampling.max_tokens,
            spec=sampling.spec,
            conversation=api_conversation(raw=True),
            n=sampling.n,
        )
        for prompt in request.prompts
    ]
    runs: list[Run] = []
    with transaction.atomic():
        for prompt, plan in zip(request.prompts, plans, strict=True):
            for index in range(sampling.n):
                chat = Chat.objects.create(owner=user, title=title_from_text(prompt), origin=ChatOrigin.API)
                runs.append(
                    run_create(
                        chat_id=chat.pk,
                        user=user,
                        content=prompt,
                        sampling=SamplingRequest(
                            max_tokens=sampling.max_tokens, spec=_choice_spec(sampling.spec, index)
                        ),
                        prompt_mode=PromptMode.RAW,
                        end_user=sampling.end_user,
                        deployment=deployment,
                        plan=plan,
                    )
                )
    return runs


def completion_abandon(*, run_ids: list[int]) -> None:
    """The client went away before the end: nobody can resume this call, so its runs are cancelled."""
    for run in Run.objects.filter(pk__in=run_ids):
        if not run.is_terminal:
            run_cancel(run=run)
