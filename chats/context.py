"""The prompt of one run: system prompt, rolling summary, recent turns verbatim, new message, within budget.

``plan_prompt`` is the pure policy (no database, no tokenizer: a token counter is passed in);
``plan_chat_prompt`` loads a chat's pieces and applies it with the serving model's tokenizer
(``inference_workers.prompting`` calls it for a run).

Prefix stability: the verbatim part always starts right after ``chat.summary_through``; only when it no
longer fits are the oldest turns dropped, and then in steps of several user turns (stateless: the cut points
are fixed positions in the unsummarized history), so successive prompts keep sharing their whole prefix and
vLLM's prefix cache keeps hitting until the next summary refresh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from chats.models import Chat, ChatOrigin, Message, MessageRole, Moderation
from core.errors import DomainError
from deployments.tokenizer import apply_chat_template, count_tokens, get_tokenizer

ChatMessages = list[dict[str, str]]
PromptTokenCounter = Callable[[ChatMessages], int]
"""Tokens of the messages once rendered with the chat template (generation prompt included)."""

SUMMARY_HEADING = "Summary of the earlier conversation:"
SYSTEM_ROLES = (MessageRole.SYSTEM, MessageRole.DEVELOPER)


class PromptTooLong(Exception):
    """Even the system prompt and the new message alone exceed the budget."""

    def __init__(self, *, tokens: int, budget: int) -> None:
        super().__init__(f"the prompt needs {tokens} tokens but the budget is {budget}")
        self.tokens = tokens
        self.budget = budget


@dataclass(frozen=True)
class Turn:
    """One earlier message of the chat, not yet covered by the summary."""

    role: str
    content: str
    tokens: int = 0
    """The content's token count (from ``Message.token_count``; 0 when unknown)."""


@dataclass(frozen=True)
class PromptPlan:
    messages: ChatMessages
    prompt_tokens: int
    """Rendered token count of ``messages`` (chat template and generation prompt included)."""
    budget: int
    kept_turns: int
    """Unsummarized turns included verbatim (the newest ones)."""
    dropped_turns: int
    """Unsummarized turns left out because they did not fit (the summary is lagging behind)."""
    summary_included: bool
    recalled: bool = False
    """The user's recalled memories are in the new message."""


def prompt_budget(*, context_limit_tokens: int, max_model_len: int, max_tokens: int) -> int:
    """Prompt tokens a run may use: the smaller of the tier's limit and the window, less its output."""
    return min(context_limit_tokens, max_model_len) - max_tokens


def chat_system_prompt(*, chat_prompt: str = "", origin: str = ChatOrigin.WEB) -> str:
    """The system prompt a chat's runs start with, before the chat's own messages ("": none): the one place it is
    chosen.

    A chat of the UI or ``/api/chats`` (origin ``web``) starts with ``chat_prompt``, its ``system_prompt`` setting
    (``PATCH /api/chats/{id}``), or when that is empty the configured ``CHAT_SYSTEM_PROMPT``. An OpenAI-compatible
    call (origin ``api``) starts with nothing of ours: its prompt is the client's messages exactly as sent, system
    and developer messages where the client put them, as vLLM's server renders them (a chat template may add its
    own default, as it does there).
    """
    if origin == ChatOrigin.API:
        return ""
    return chat_prompt if chat_prompt.strip() else settings.CONTEXT.system_prompt


def system_content(*, system_prompt: str, summary: str) -> str:
    parts = [system_prompt.strip()]
    if summary.strip():
        parts.append(f"{SUMMARY_HEADING}\n{summary.strip()}")
    return "\n\n".join(p for p in parts if p)


def _messages(
    system: str,
    turns: Sequence[Turn],
    new_message: str,
    new_role: str = MessageRole.USER,
    head: Sequence[Turn] = (),
    recalled: str = "",
) -> ChatMessages:
    messages: ChatMessages = [{"role": "system", "content": system}] if system else []
    messages.extend({"role": t.role, "content": t.content} for t in (*head, *turns))
    if recalled and new_role == MessageRole.USER:
        # After the stable prefix (system, summary, turns): the memories change from prompt to prompt. In the new
        # message rather than a system message of their own, which not every chat template accepts mid-conversation.
        new_message = f"{recalled}\n\n{new_message}"
    messages.append({"role": str(new_role), "content": new_message})
    return messages


def cut_points(turns: Sequence[Turn], *, drop_step: int) -> list[int]:
    """Where the verbatim part may start: 0, then every ``drop_step``-th user turn, then "no turns".

    The positions depend only on the unsummarized history, which only grows at its end, so the cut chosen
    for one turn stays the cut for the following turns until it no longer fits.
    """
    user_starts = [i for i, t in enumerate(turns) if t.role == "user" and i > 0]
    points = [0, *user_starts[drop_step - 1 :: max(1, drop_step)], len(turns)]
    return sorted(set(points))


def _first_plausible(points: Sequence[int], turns: Sequence[Turn], budget: int) -> int:
    suffix = 0
    sums = [0] * (len(turns) + 1)
    for i in range(len(turns) - 1, -1, -1):
        suffix += turns[i].tokens
        sums[i] = suffix
    for index, point in enumerate(points):
        if sums[point] <= budget:
            return index
    return len(points) - 1


def plan_prompt(
    *,
    system_prompt: str,
    summary: str,
    turns: Sequence[Turn],
    new_message: str,
    budget: int,
    count_tokens: PromptTokenCounter,
    drop_step: int = 1,
    new_role: str = MessageRole.USER,
    head: Sequence[Turn] = (),
    recalled: str = "",
) -> PromptPlan:
    """Newest-kept verbatim turns after the summary, the whole rendered prompt within ``budget``.

    ``new_role`` is the role of the message the run answers: ``user``, ``tool`` when an OpenAI-compatible call
    ends with a tool's result, ``assistant`` when it ends with an answer to go on from. ``head``: messages kept
    right after the system prompt whatever the budget (an OpenAI-compatible call's leading system and developer
    messages), never dropped with the oldest turns. ``recalled``: the user's memories from other chats
    (``memory.services.memory_block``), put before the new message's text, after everything that stays the same from
    one prompt to the next; left out when they do not fit even with no turns. Raises :class:`PromptTooLong` when not
    even the system prompt, ``head`` and ``new_message`` fit.
    """
    args = (system_prompt, summary, turns, new_message, budget, count_tokens, drop_step, new_role, head)
    if recalled:
        try:
            return _plan(*args, recalled=recalled)
        except PromptTooLong:
            pass  # the memories are a help, not the prompt: planned without them
    return _plan(*args, recalled="")


def _plan(
    system_prompt: str,
    summary: str,
    turns: Sequence[Turn],
    new_message: str,
    budget: int,
    count_tokens: PromptTokenCounter,
    drop_step: int,
    new_role: str,
    head: Sequence[Turn],
    *,
    recalled: str,
) -> PromptPlan:
    for summary_text in (summary, ""):
        system = system_content(system_prompt=system_prompt, summary=summary_text)
        points = cut_points(turns, drop_step=drop_step)
        # Fewer turns never render longer: binary-search the earliest cut that fits. The known content token
        # counts are a lower bound of a rendering (every message adds template tokens), so cuts whose turns
        # alone exceed the budget are skipped without rendering them.
        lo, hi = _first_plausible(points, turns, budget), len(points) - 1
        best: tuple[int, ChatMessages, int] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            messages = _messages(system, turns[points[mid] :], new_message, new_role, head, recalled)
            tokens = count_tokens(messages)
            if tokens <= budget:
                best = (points[mid], messages, tokens)
                hi = mid - 1
            else:
                lo = mid + 1
        if best is not None:
            start, messages, tokens = best
            return PromptPlan(
                messages=messages,
                prompt_tokens=tokens,
                budget=budget,
                kept_turns=len(turns) - start,
                dropped_turns=start,
                summary_included=bool(summary_text.strip()),
                recalled=bool(recalled),
            )
        if not summary.strip():
            break
    alone = _messages(system_content(system_prompt=system_prompt, summary=""), [], new_message, new_role, head)
    raise PromptTooLong(tokens=count_tokens(alone), budget=budget)


def rendered_token_count(messages: ChatMessages) -> int:
    """The serving model's count for ``messages`` rendered with its chat template."""
    return len(get_tokenizer().encode(apply_chat_template(messages), add_special_tokens=False))


def _split_head(turns: list[Turn]) -> tuple[list[Turn], list[Turn]]:
    """The leading system/developer messages (kept whatever the budget), and the turns after them."""
    start = 0
    while start < len(turns) and turns[start].role in SYSTEM_ROLES:
        start += 1
    return turns[:start], turns[start:]


def plan_chat_prompt(
    *, chat: Chat, user_message: Message, context_limit_tokens: int, max_tokens: int, recalled: str = ""
) -> PromptPlan:
    """Loads the chat's pieces before ``user_message`` and plans the prompt that answers it (see
    :func:`plan_prompt`); ``context_limit_tokens`` is the tier's, ``max_tokens`` the answer's.

    Every stored message is a turn in its place, system and developer ones included (an OpenAI-compatible call
    may send them anywhere); the leading ones are the plan's ``head``, kept when older turns are dropped, and
    replace :func:`chat_system_prompt`."""
    config = settings.CONTEXT
    summary = chat.summary
    earlier = Message.objects.filter(
        chat_id=chat.pk, id__lt=user_message.pk, superseded=False, moderation=Moderation.NONE
    )
    if chat.summary_through_id is not None and chat.summary_through_id < user_message.pk:
        # The turns after the summary, and the chat's own system and developer messages, in one query.
        earlier = earlier.filter(Q(id__gt=chat.summary_through_id) | Q(role__in=SYSTEM_ROLES))
    else:
        summary = ""
    rows = earlier.order_by("id").values_list("role", "content", "token_count")
    head, turns = _split_head([Turn(role=role, content=content, tokens=tokens) for role, content, tokens in rows])
    budget = prompt_budget(
        context_limit_tokens=context_limit_tokens,
        max_model_len=settings.ENGINE.max_model_len,
        max_tokens=max_tokens,
    )
    return plan_prompt(
        # A chat's own leading system messages (an OpenAI-compatible call's) replace ours.
        system_prompt="" if head else chat_system_prompt(chat_prompt=chat.system_prompt, origin=chat.origin),
        summary=summary,
        turns=turns,
        new_message=user_message.content,
        budget=budget,
        count_tokens=rendered_token_count,
        drop_step=config.drop_step_turns,
        new_role=user_message.role,
        head=head,
        recalled=recalled,
    )


class MessageTooLong(DomainError):
    """A posted message that cannot fit in the prompt even with no history at all (answered 400)."""

    code = "message_too_long"


def message_fit_check(
    *, content: str, context_limit_tokens: int, max_tokens: int, tier_name: str = "", system_prompt: str | None = None
) -> int:
    """The message's token count; raises :class:`MessageTooLong` if it cannot fit in a prompt even alone.

    Called when a message is posted, so an oversized one is refused before anything is written.
    ``system_prompt`` is the one the chat's runs use (:func:`chat_system_prompt`; None: the default).
    """
    budget = prompt_budget(
        context_limit_tokens=context_limit_tokens, max_model_len=settings.ENGINE.max_model_len, max_tokens=max_tokens
    )
    tokens = count_tokens(content)
    system = system_content(system_prompt=chat_system_prompt() if system_prompt is None else system_prompt, summary="")
    alone = rendered_token_count(_messages(system, [], content))
    if alone > budget:
        limit = max(0, budget - (alone - tokens))
        where = f" on the {tier_name} tier" if tier_name else ""
        raise MessageTooLong(
            f"This message is {tokens} tokens long; at most {limit} tokens fit in one message{where} "
            f"(a {budget}-token prompt budget, leaving room for a {max_tokens}-token answer). "
            "Shorten it or ask for fewer max_tokens."
        )
    return tokens
