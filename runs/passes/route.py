"""The routing pass: ``model: "auto"`` (or no model, on a tier whose default is ``auto``) goes to the deployment
the router picks (``model_routing``); a pinned ``name`` or ``name@version`` is never rerouted.

The record names the policy that decided (``rules``, ``classifier``, ``spill``, ``single``), its reason, the
difficulty score and the deployment picked; the run's ``deployment`` is that one, and a ``/v1`` answer's ``model``
names it.
"""

from __future__ import annotations

import time

from deployments.selection import resolve_model
from model_routing.policy import RouteFacts
from model_routing.selectors import tier_default_is_auto
from model_routing.services import route_auto
from runs.passes import PassRecord, PromptFacts, PromptPlan, timed

NAME = "route"


class Route:
    name = NAME

    def __call__(self, facts: PromptFacts, plan: PromptPlan) -> PassRecord | None:
        served = plan.served
        if not (served.auto or (served.defaulted and tier_default_is_auto(tier=facts.tier))):
            return None
        started = time.perf_counter()
        decision = route_auto(
            facts=RouteFacts(
                prompt_text=facts.content,
                prompt_tokens=facts.history_tokens + facts.count_tokens(facts.content),
                max_tokens=facts.max_tokens,
                has_tools=facts.has_tools,
                structured=facts.structured,
                tier_name=facts.tier.name,
            ),
            tier=facts.tier,
        )
        plan.served = resolve_model(decision.model)  # 404/503 as for a model named outright
        detail: dict[str, object] = {"policy": decision.policy, "reason": decision.reason, "model": plan.served.key}
        if decision.score is not None:
            detail["score"] = round(decision.score, 4)
        return timed(NAME, started, plan.served.key, **detail)
