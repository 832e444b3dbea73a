"""The prompt a run is generated from: ``chats.context`` plans the messages within the context budget (system,
rolling summary, recent turns, the new message); this renders them with the model's chat template, with the
run's tools when it has any. A raw run (``PromptMode.RAW``, ``/v1/completions``) is its user message's text as
it is: no template, no history, no system prompt. A ``PromptMode.CONTINUE`` run (an OpenAI-compatible call with
``continue_final_message``) leaves its last message open. A run that continues an earlier attempt's answer has
that text appended, as the start of the answer; so does a run that continues a stopped answer of the chat
(``Revision.CONTINUE``: the replaced answer's text first)."""

from __future__ import annotations

from chats.context import ChatMessages, PromptPlan, plan_chat_prompt
from deployments.tokenizer import apply_chat_template
from memory.services import memory_block
from runs.models import PromptMode, Revision, Run
from runs.passes.memory import recalled_memory_texts


def plan_run_prompt(*, run: Run) -> PromptPlan:
    """The run's prompt plan: its chat before its user message, within its tier's budget and its ``max_tokens``, and
    the memories its prompt recalled from the user's other chats (``runs.passes.memory``)."""
    continued = run.replaces if run.revision == Revision.CONTINUE else None
    return plan_chat_prompt(
        chat=run.chat,
        user_message=run.user_message,
        context_limit_tokens=run.tier.context_limit_tokens,
        # A continued answer follows the planned prompt: its tokens are left room for like the answer's own.
        max_tokens=run.max_tokens + (continued.token_count if continued is not None else 0),
        recalled=memory_block(recalled_memory_texts(run)),
    )


def continued_answer(run: Run) -> str:
    """The chat's stopped answer this run continues (``Revision.CONTINUE``), else ``""``."""
    if run.revision != Revision.CONTINUE or run.replaces is None:
        return ""
    return run.replaces.content


def build_prompt_messages(*, run: Run) -> ChatMessages:
    """Role/content messages for the model's chat template: the run's prompt, within its budget."""
    return plan_run_prompt(run=run).messages


def build_run_prompt(*, run: Run, answer_prefix: str = "") -> str:
    """The run's prompt text; ``answer_prefix`` (the text an earlier attempt streamed, which this one continues)
    follows it as the start of the answer: the chat template ends with the assistant's turn opener, so the engine
    goes on writing that turn; a raw prompt is followed by it as its completion so far."""
    if run.prompt_mode == PromptMode.RAW:
        return run.user_message.content + answer_prefix
    continue_final = run.prompt_mode == PromptMode.CONTINUE
    messages = build_prompt_messages(run=run)
    prefix = continued_answer(run) + answer_prefix
    return apply_chat_template(messages, tools=run.tools or None, continue_final=continue_final) + prefix
