"""The prompt a run is generated from: the chat's turns up to the run's user message, in the chat template.

``chats.context.build_prompt_messages(run=...)`` (the long-conversation budget with a rolling summary) is
used when that module provides it; until then a plain builder keeps the most recent turns that fit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings

from chats.models import Message, MessageRole
from inference_workers.tokenizer import apply_chat_template, get_tokenizer
from runs.models import Run

ChatMessages = list[dict[str, str]]


def _context_builder() -> Callable[..., ChatMessages] | None:
    try:
        module = importlib.import_module("chats.context")
    except ImportError:
        return None
    builder = getattr(module, "build_prompt_messages", None)
    return cast("Callable[..., ChatMessages] | None", builder)


def recent_turns_messages(*, run: Run) -> ChatMessages:
    """The chat's messages up to and including the run's user message, oldest dropped to fit the window."""
    history = list(
        Message.objects.filter(chat_id=run.chat_id, id__lte=run.user_message_id)
        .exclude(role=MessageRole.SYSTEM)
        .order_by("created_at", "id")
        .values_list("role", "content")
    )
    messages: ChatMessages = [{"role": role, "content": content} for role, content in history]
    budget = settings.ENGINE.max_model_len - run.max_tokens
    tokenizer: Any = get_tokenizer()
    while len(messages) > 1 and len(tokenizer.encode(apply_chat_template(messages))) > budget:
        messages = messages[2:] if len(messages) > 2 else messages[1:]
    return messages


def build_run_prompt(*, run: Run) -> str:
    builder = _context_builder()
    messages = builder(run=run) if builder is not None else recent_turns_messages(run=run)
    return apply_chat_template(messages)
