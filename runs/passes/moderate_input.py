"""The input moderation pass: the tier's moderation policy checks the prompt before anything is queued or charged.

A flagged prompt is refused (:class:`~runs.passes.PromptRefused`, 400 ``content_policy_violation``); a user the
policy's escalation has suspended is a 403 ``moderation_suspended`` (``moderation.services``). The record keeps the
backend, the flagged categories and the highest scores, so the admin's flagged runs show why.
"""

from __future__ import annotations

import time

from accounts.models import Tier, User
from moderation.selectors import moderation_policy
from moderation.services import moderate_input, violation_record
from moderation.verdicts import Verdict
from runs.passes import PassRecord, PromptFacts, PromptPlan, PromptRefused, timed

NAME = "moderate_input"
TOP_SCORES = 3
"""Scores kept on the run: the highest few (every category's is on the violation record)."""


def verdict_detail(verdict: Verdict) -> dict[str, object]:
    flagged = sorted(name for name, hit in verdict.categories.items() if hit)
    top = sorted(verdict.scores.items(), key=lambda item: -item[1])[:TOP_SCORES]
    return {"backend": verdict.backend, "categories": flagged, "scores": {k: round(v, 4) for k, v in top}}


class ModerateInput:
    name = NAME

    def __call__(self, facts: PromptFacts, plan: PromptPlan) -> PassRecord | None:
        policy = moderation_policy(tier=facts.tier)
        if not policy.input_enabled:
            return None
        started = time.perf_counter()
        verdict = moderate_input(user=facts.user, tier=facts.tier, text=facts.content)  # 403 while suspended
        record = timed(NAME, started, "refused" if verdict.flagged else "allowed", **verdict_detail(verdict))
        if verdict.flagged:
            flagged = ", ".join(record.detail["categories"]) or "content"  # type: ignore[arg-type]
            raise PromptRefused(
                f"This prompt was flagged by moderation ({flagged}) and was not answered. "
                "Rephrase it; repeated violations suspend the account for a while.",
                record=record,
                verdict=verdict,
            )
        return record


def refusal_record(*, user: User, tier: Tier, refused: PromptRefused, message_id: int | None) -> None:
    """The refused prompt's violation (counted against the user by the tier's escalation policy)."""
    violation_record(user=user, tier=tier, direction="input", verdict=refused.verdict, message_id=message_id)
