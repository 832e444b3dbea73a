"""The rolling summary of a long chat: when to write it, and writing it with the model itself.

A chat gets its first summary once its verbatim turns (those after ``chat.summary_through``) pass
``summary_threshold_fraction`` of its prompt budget; the budget is derived from the tier's
``context_limit_tokens``, so smaller tiers are summarized sooner. The summary covers every turn except the
newest ``summary_keep_recent_turns`` user turns (and their answers), which stay verbatim. It is refreshed
only after ``summary_refresh_every_turns`` (K) further user turns (or sooner when the verbatim part nears the
budget, ``summary_force_fraction``): between refreshes the prompt's prefix (system prompt, summary, the
verbatim turns so far) is identical from one turn to the next, so vLLM's prefix cache serves it. The model
writes the summary in a low-priority task on a worker (``inference_workers.tasks.chat_summarize``), sent by
``chats.summary_schedule``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from chats.context import prompt_budget, rendered_token_count
from chats.models import Chat, Message, MessageRole, Moderation
from core.config import ContextConfig
from deployments.tokenizer import apply_chat_template, count_tokens, get_tokenizer

logger = logging.getLogger(__name__)

TextGenerator = Callable[[str, int], str]
"""``(prompt, max_tokens) -> text``: one non-streamed generation (the worker's engine, at summary priority)."""

SUMMARIZER_SYSTEM_PROMPT = (
    "You maintain a running summary of a conversation between a user and an assistant. "
    "Keep the facts, names, numbers, decisions and open questions; drop greetings and filler."
)


@dataclass(frozen=True)
class SummaryState:
    """What the cadence decision needs to know about a chat."""

    has_summary: bool
    unsummarized_tokens: int
    """Tokens of the messages after ``summary_through`` (the verbatim part)."""
    unsummarized_user_turns: int


def summary_threshold_tokens(*, budget: int, config: ContextConfig) -> int:
    return max(1, int(budget * config.summary_threshold_fraction))


def summary_due(*, state: SummaryState, budget: int, config: ContextConfig) -> bool:
    """First summary past the threshold; afterwards a refresh every K user turns (still past the threshold),
    or sooner once the verbatim part passes ``summary_force_fraction`` of the budget (it would soon overflow).

    After a refresh ``summary_keep_recent_turns`` user turns stay verbatim, so K more make
    ``keep + K`` unsummarized user turns.
    """
    if state.unsummarized_tokens < summary_threshold_tokens(budget=budget, config=config):
        return False
    if not state.has_summary:
        return True
    if state.unsummarized_tokens >= budget * config.summary_force_fraction:
        return True
    return state.unsummarized_user_turns >= config.summary_keep_recent_turns + config.summary_refresh_every_turns


def engine_has_room_for_background(*, running: int, waiting: int, slots: int, max_load: float) -> bool:
    """Background work may start: nothing waits in the engine and few of its slots are busy."""
    return waiting == 0 and running < max(1, int(slots * max_load))


def fold_split(roles: Sequence[str], *, keep_recent_turns: int) -> int:
    """How many of the oldest unsummarized messages a refresh folds in: all before the last kept user turns."""
    user_positions = [i for i, role in enumerate(roles) if role == MessageRole.USER]
    if keep_recent_turns <= 0:
        return len(roles)
    if len(user_positions) <= keep_recent_turns:
        return 0
    return user_positions[-keep_recent_turns]


# Reads


def _unsummarized(chat: Chat) -> Q:
    condition = Q(chat_id=chat.pk, superseded=False, moderation=Moderation.NONE) & ~Q(role=MessageRole.SYSTEM)
    if chat.summary_through_id is not None:
        condition &= Q(id__gt=chat.summary_through_id)
    return condition


def chat_budget(*, chat: Chat, max_tokens: int | None = None) -> int:
    """The prompt budget of the chat's turns (its owner's tier, the default output allowance)."""
    tier = chat.owner.tier
    if max_tokens is None:
        max_tokens = min(settings.CHAT_LIMITS.default_max_tokens, tier.max_output_tokens)
    return prompt_budget(
        context_limit_tokens=tier.context_limit_tokens,
        max_model_len=settings.ENGINE.max_model_len,
        max_tokens=max_tokens,
    )


def chat_summary_state(*, chat: Chat) -> SummaryState:
    rows = list(Message.objects.filter(_unsummarized(chat)).values_list("role", "token_count"))
    return SummaryState(
        has_summary=bool(chat.summary),
        unsummarized_tokens=sum(tokens for _, tokens in rows),
        unsummarized_user_turns=sum(1 for role, _ in rows if role == MessageRole.USER),
    )


def chat_summary_is_due(*, chat: Chat) -> bool:
    return summary_due(state=chat_summary_state(chat=chat), budget=chat_budget(chat=chat), config=settings.CONTEXT)


# Writing the summary


def transcript_line(role: str, content: str) -> str:
    speaker = {MessageRole.USER.value: "User", MessageRole.TOOL.value: "Tool"}.get(role, "Assistant")
    return f"{speaker}: {content.strip()}"


def summary_prompt_messages(*, previous_summary: str, transcript: Sequence[str]) -> list[dict[str, str]]:
    previous = previous_summary.strip() or "(none yet)"
    body = "\n".join(transcript)
    return [
        {"role": "system", "content": SUMMARIZER_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": (
                f"Summary so far:\n{previous}\n\nNew turns:\n{body}\n\n"
                "Write the updated summary of the whole conversation in a few short sentences."
            ),
        },
    ]


def _fit_chunks(
    lines: Sequence[str], *, previous_summary: str, input_budget: int, count_tokens: Callable[[str], int]
) -> list[list[str]]:
    """Splits the transcript so each summarization prompt fits; an oversized line is cut to fit alone."""
    overhead = rendered_token_count(summary_prompt_messages(previous_summary=previous_summary, transcript=[]))
    # The summary grows back to at most summary_max_tokens between chunks; keep room for it.
    room = max(64, input_budget - overhead - settings.CONTEXT.summary_max_tokens)
    chunks: list[list[str]] = []
    current: list[str] = []
    used = 0
    for line in lines:
        tokens = count_tokens(line) + 1
        if tokens > room:
            line = _truncate(line, room - 1)
            tokens = room
        if current and used + tokens > room:
            chunks.append(current)
            current, used = [], 0
        current.append(line)
        used += tokens
    if current:
        chunks.append(current)
    return chunks


def _truncate(text: str, max_tokens: int) -> str:
    tokenizer = get_tokenizer()
    ids = tokenizer.encode(text, add_special_tokens=False)
    return str(tokenizer.decode(ids[: max(1, max_tokens - 1)])) + "…"


def fold_into_summary(*, previous_summary: str, lines: Sequence[str], generate: TextGenerator) -> str:
    """The model's summary of ``previous_summary`` followed by the transcript ``lines``.

    The lines go in chunks whose prompts fit the engine's window (leaving room for the summary); each chunk
    is folded into the summary the previous one produced.
    """
    config = settings.CONTEXT
    input_budget = settings.ENGINE.max_model_len - config.summary_max_tokens
    summary = previous_summary
    for chunk in _fit_chunks(lines, previous_summary=summary, input_budget=input_budget, count_tokens=count_tokens):
        messages = summary_prompt_messages(previous_summary=summary, transcript=chunk)
        if rendered_token_count(messages) > input_budget:  # a previous summary that ran long: restart from it
            messages = summary_prompt_messages(previous_summary="", transcript=chunk)
        summary = generate(apply_chat_template(messages), config.summary_max_tokens).strip() or summary
    return summary


def chat_summary_refresh(*, chat_id: int, generate: TextGenerator) -> bool:
    """Folds the chat's older unsummarized turns into its summary; True if a new summary was stored.

    Runs outside any transaction while the model writes (seconds); the result is stored only if the summary
    has not moved meanwhile (compare-and-set on ``summary_through``), so a duplicate task cannot regress it.
    """
    chat = Chat.objects.select_related("owner__tier").get(pk=chat_id)
    if not chat_summary_is_due(chat=chat):
        return False
    rows = list(Message.objects.filter(_unsummarized(chat)).order_by("id").values_list("id", "role", "content"))
    split = fold_split([role for _, role, _ in rows], keep_recent_turns=settings.CONTEXT.summary_keep_recent_turns)
    if split == 0:
        return False
    folded = rows[:split]
    summary = fold_into_summary(
        previous_summary=chat.summary,
        lines=[transcript_line(role, content) for _, role, content in folded],
        generate=generate,
    )
    through_id = folded[-1][0]
    updated = Chat.objects.filter(pk=chat.pk, summary_through_id=chat.summary_through_id).update(
        summary=summary, summary_through_id=through_id
    )
    if updated:
        logger.info("chat %s: summary now covers messages through %s", chat.pk, through_id)
    return bool(updated)
