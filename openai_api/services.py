"""One OpenAI-compatible call = one chat (origin ``api``) holding the request's messages, and one run.

The run goes through ``run_create`` like a prompt from the chat UI: the same admission (token bucket,
concurrency cap, queue depth: 429 with ``Retry-After``), tier caps, fair scheduling, workers and stream.
Everything is written in one transaction, so a refused or invalid call leaves no row behind.
"""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from chats.models import Chat, ChatOrigin, Message, MessageRole
from deployments.tokenizer import count_tokens
from openai_api.requests import ChatCompletionRequest
from runs.models import Run
from runs.services import run_cancel, run_create


def completion_create(*, user: User, request: ChatCompletionRequest) -> Run:
    with transaction.atomic():
        chat = Chat.objects.create(owner=user, title=request.prompt.strip().splitlines()[0][:80], origin=ChatOrigin.API)
        rows: list[Message] = []
        if request.system_prompt is not None:
            rows.append(
                Message(
                    chat=chat,
                    role=MessageRole.SYSTEM,
                    content=request.system_prompt,
                    token_count=count_tokens(request.system_prompt),
                )
            )
        rows.extend(
            Message(chat=chat, role=role, content=content, token_count=count_tokens(content))
            for role, content in request.history
        )
        Message.objects.bulk_create(rows)  # in order: ids follow the conversation
        return run_create(
            chat=chat,
            user=user,
            content=request.prompt,
            sampling=request.sampling,
            system_prompt=request.system_prompt,
        )


def completion_abandon(*, run_id: int) -> None:
    """The client went away before the end: nobody can resume this call, so its run is cancelled."""
    run = Run.objects.filter(pk=run_id).first()
    if run is not None and not run.is_terminal:
        run_cancel(run=run)
