"""The prompt a run is generated from: ``chats.context`` plans the messages within the context budget (system,
rolling summary, recent turns, the new message); this renders them with the model's chat template."""

from __future__ import annotations

from chats.context import build_prompt_messages
from inference_workers.tokenizer import apply_chat_template
from runs.models import Run


def build_run_prompt(*, run: Run) -> str:
    return apply_chat_template(build_prompt_messages(run=run))
