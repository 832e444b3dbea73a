"""One OpenAI-compatible call = one chat (origin ``api``) and one run per choice.

A choice is an ordinary run created by ``run_create``, like a prompt from the chat UI: the same admission
(token bucket, concurrency cap, queue depth: 429 with ``Retry-After``), tier caps, fair scheduling, workers
and stream. ``n`` > 1 (and each string of a ``/v1/completions`` prompt list) is one run per choice, each in a
chat of its own holding the call's messages, so each choice streams, is charged, and counts against the
tier's concurrency cap like any prompt. With a ``seed``, choice ``i`` samples with ``seed + i``: the call
repeats for a repeated seed, and its choices differ.

Everything is written in one transaction, so a refused or invalid call leaves no row behind (a reservation
already made for an earlier choice is reclaimed by the admission's pending expiry).
"""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from chats.models import Chat, ChatOrigin, Message, MessageRole
from deployments.selection import Served
from deployments.tokenizer import count_tokens
from generation.sampling import SamplingSpec
from openai_api.requests import ChatCompletionRequest, CompletionRequest
from openai_api.tools.prompt import system_prompt_with_tools
from runs.models import PromptMode, Run
from runs.services import SamplingRequest, run_cancel, run_create


def _choice_spec(spec: SamplingSpec, index: int) -> SamplingSpec:
    return spec if index == 0 or spec.seed is None else spec.with_seed(spec.seed + index)


def _title(text: str) -> str:
    lines = text.replace("\x00", "").strip().splitlines()  # a title is plain text: no NUL (core.nul_text)
    return lines[0][:80] if lines else ""


def chat_completion_create(*, user: User, request: ChatCompletionRequest, deployment: Served) -> list[Run]:
    """The call's runs, choice ``i`` at index ``i``, all on ``deployment`` (resolved from ``model``)."""
    sampling = request.sampling
    system_prompt = system_prompt_with_tools(request.system_prompt, request.tools)
    system_tokens = count_tokens(system_prompt) if system_prompt is not None else 0
    history_tokens = [count_tokens(content) for _, content in request.history]
    runs: list[Run] = []
    with transaction.atomic():
        for index in range(sampling.n):
            chat = Chat.objects.create(owner=user, title=_title(request.prompt), origin=ChatOrigin.API)
            rows: list[Message] = []
            if system_prompt is not None:
                rows.append(
                    Message(chat=chat, role=MessageRole.SYSTEM, content=system_prompt, token_count=system_tokens)
                )
            rows.extend(
                Message(chat=chat, role=role, content=content, token_count=tokens)
                for (role, content), tokens in zip(request.history, history_tokens, strict=False)
            )
            Message.objects.bulk_create(rows)  # in order: ids follow the conversation
            runs.append(
                run_create(
                    chat_id=chat.pk,
                    user=user,
                    content=request.prompt,
                    sampling=SamplingRequest(max_tokens=sampling.max_tokens, spec=_choice_spec(sampling.spec, index)),
                    system_prompt=system_prompt,
                    tools=request.tools.tools or None,
                    end_user=sampling.end_user,
                    prompt_role=MessageRole(request.last_role),
                    deployment=deployment,
                )
            )
    return runs


def text_completion_create(*, user: User, request: CompletionRequest, deployment: Served) -> list[Run]:
    """The call's runs: prompt ``p``'s choice ``j`` at index ``p * n + j`` (vLLM's order), on ``deployment``."""
    sampling = request.sampling
    runs: list[Run] = []
    with transaction.atomic():
        for prompt in request.prompts:
            for index in range(sampling.n):
                chat = Chat.objects.create(owner=user, title=_title(prompt), origin=ChatOrigin.API)
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
                    )
                )
    return runs


def completion_abandon(*, run_ids: list[int]) -> None:
    """The client went away before the end: nobody can resume this call, so its runs are cancelled."""
    for run in Run.objects.filter(pk__in=run_ids):
        if not run.is_terminal:
            run_cancel(run=run)
