"""The memory pass (``memory``, docs/memory.md): for a user who turned memory on, in a tier that allows it, a prompt
posted to one of their chats recalls the relevant memories from their other chats, and is kept as a memory itself
once it is written.

What was recalled is recorded on the run (``Run.passes``: the memories' ids, their similarities, and the digest the
answer cache keys on); the worker reads the ids back when it builds the prompt (:func:`recalled_memory_texts`), so a
memory deleted in between is left out.
"""

from __future__ import annotations

import time
from typing import Any

from memory.selectors import recalled_texts
from memory.services import Recall, memory_active, memory_keep, memory_recall
from runs.models import Run
from runs.passes import PassRecord, PromptFacts, PromptPlan, timed

NAME = "memory"


class RecallMemory:
    name = NAME

    def __call__(self, facts: PromptFacts, plan: PromptPlan) -> PassRecord | None:
        if facts.chat_id is None or facts.conversation is None:
            return None  # an OpenAI-compatible call is stateless; a revision answers the prompt already posted
        started = time.perf_counter()
        if not memory_active(user=facts.user, tier=facts.tier):
            return None
        recall = memory_recall(user_id=facts.user.pk, tier=facts.tier, prompt=facts.content, chat_id=facts.chat_id)
        plan.memory = recall
        if recall.embedded is None:
            return timed(NAME, started, "unavailable", embed_ms=round(recall.embed_ms, 3))
        detail: dict[str, Any] = {"embed_ms": round(recall.embed_ms, 3), "lookup_ms": round(recall.lookup_ms, 3)}
        if not recall.memories:
            return timed(NAME, started, "none", **detail)
        detail.update(
            memories=[m.id for m in recall.memories],
            similarities=[round(m.similarity, 4) for m in recall.memories],
            digest=recall.digest,
        )
        return timed(NAME, started, "recalled", **detail)


def memory_after_create(*, run: Run, plan: PromptPlan) -> None:
    """Once the prompt is written: it is kept as a memory (with the embedding the recall made)."""
    recall: Recall | None = plan.memory
    if recall is not None and recall.embedded is not None and run.user_message is not None:
        memory_keep(user_id=run.user_id, message=run.user_message, recall=recall)


def _record(run: Run) -> dict[str, Any] | None:
    return next((p for p in run.passes or [] if p.get("pass") == NAME and p.get("decision") == "recalled"), None)


def recalled_memory_texts(run: Run) -> list[str]:
    """The memories the run's prompt recalled, still there, in the order recalled ([] for none)."""
    record = _record(run)
    if record is None:
        return []
    return recalled_texts(user_id=run.user_id, ids=[int(i) for i in record.get("memories", [])])


def recalled_digest(run: Run) -> str:
    """The digest of the memories the run's prompt recalled, as the answer cache keyed it ("" for none)."""
    record = _record(run)
    return str(record.get("digest", "")) if record is not None else ""
