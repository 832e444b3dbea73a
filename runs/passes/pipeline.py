"""The passes before the queue, in their order (the package's doc says why this order), and the loop that runs them."""

from __future__ import annotations

from runs.passes import PromptFacts, PromptPass, PromptPlan
from runs.passes.cache import AnswerCache
from runs.passes.memory import RecallMemory
from runs.passes.moderate_input import ModerateInput
from runs.passes.route import Route

BEFORE_QUEUE: tuple[PromptPass, ...] = (ModerateInput(), Route(), RecallMemory(), AnswerCache())
ROUTE_ONLY: tuple[PromptPass, ...] = (Route(),)
"""A regenerated or continued answer's: its prompt was checked when it was posted, and it wants a new answer."""


def prompt_passes(facts: PromptFacts, passes: tuple[PromptPass, ...] | None = None) -> PromptPlan:
    """Runs the passes before the queue on one prompt: raises what a pass raises (a refusal), else the plan.

    ``passes``: a subset of the product's (a revision's: :data:`ROUTE_ONLY`)."""
    plan = PromptPlan(served=facts.served)
    for prompt_pass in BEFORE_QUEUE if passes is None else passes:
        record = prompt_pass(facts, plan)
        if record is not None:
            plan.records.append(record)
    return plan
