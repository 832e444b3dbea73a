"""The router's pure policy core: rules, then the difficulty score, then load-aware spill (no Django, no Redis)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from model_routing.policy import (
    ModelSize,
    RouteDecision,
    RouteFacts,
    RoutePolicyName,
    RouterConfig,
    build_router,
    decide,
)

FACTS = RouteFacts(
    prompt_text="hello", prompt_tokens=20, max_tokens=128, has_tools=False, structured=False, tier_name="free"
)


@dataclass
class FixedScore:
    value: float
    seen: list[str] = field(default_factory=list)

    def score(self, text: str) -> float:
        self.seen.append(text)
        return self.value


@dataclass
class Gates:
    states: dict[tuple[str, ModelSize], bool | None] = field(default_factory=dict)

    def closed(self, tier: str, size: ModelSize) -> bool | None:
        return self.states.get((tier, size))


def route(
    facts: RouteFacts, *, score: float = 0.1, gates: Gates | None = None, **config: Any
) -> tuple[RouteDecision, FixedScore]:
    scorer = FixedScore(score)
    router = build_router(RouterConfig(**config), scorer=scorer, gates=gates or Gates())
    return decide(router, facts, small="small-m", large="large-m@v2"), scorer


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"has_tools": True}, "tools"),
        ({"structured": True}, "structured"),
        ({"prompt_tokens": 1025}, "prompt of 1025 tokens"),
        ({"max_tokens": 513}, "max_tokens 513"),
    ],
)
def test_a_rule_sends_the_prompt_to_the_large_model_without_scoring_it(change: dict[str, Any], why: str) -> None:
    decision, scorer = route(replace(FACTS, **change), score=0.0)
    assert (decision.model, decision.policy, decision.score) == ("large-m@v2", "rules", None)
    assert why in decision.reason
    assert scorer.seen == []  # the classifier never ran


def test_rules_the_tier_turned_off_leave_the_prompt_to_the_classifier() -> None:
    facts = replace(FACTS, has_tools=True, structured=True)
    decision, _ = route(facts, tools_need_large=False, structured_needs_large=False)
    assert (decision.model, decision.policy) == ("small-m", "classifier")
    at_limit = replace(FACTS, prompt_tokens=1024, max_tokens=512)  # the limits themselves are small
    assert route(at_limit)[0].policy == "classifier"


@pytest.mark.parametrize(("score", "model"), [(0.49, "small-m"), (0.5, "large-m@v2"), (0.93, "large-m@v2")])
def test_the_difficulty_score_at_or_above_the_threshold_goes_large(score: float, model: str) -> None:
    decision, scorer = route(FACTS, score=score, difficulty_threshold=0.5)
    assert (decision.model, decision.policy, decision.score) == (model, "classifier", score)
    assert scorer.seen == ["hello"]


def test_spill_sends_a_large_prompt_to_the_small_model_while_the_large_gate_is_closed_for_its_tier() -> None:
    closed = Gates({("free", ModelSize.LARGE): True, ("free", ModelSize.SMALL): False})
    decision, _ = route(FACTS, score=0.9, gates=closed, spill_enabled=True)
    assert (decision.model, decision.policy, decision.score) == ("small-m", "spill", 0.9)
    assert "gate closed for free" in decision.reason
    rules, _ = route(replace(FACTS, has_tools=True), gates=closed, spill_enabled=True)
    assert (rules.model, rules.policy) == ("small-m", RoutePolicyName.SPILL)


@pytest.mark.parametrize(
    ("spill_enabled", "states"),
    [
        (False, {("free", ModelSize.LARGE): True}),  # the tier waits for the large model
        (True, {("free", ModelSize.LARGE): False}),  # open
        (True, {}),  # unknown (no dispatcher published): never treated as closed
        (True, {("pro", ModelSize.LARGE): True}),  # another tier's gate
        (True, {("free", ModelSize.LARGE): True, ("free", ModelSize.SMALL): True}),  # both full: no better place
    ],
)
def test_no_spill(spill_enabled: bool, states: dict[tuple[str, ModelSize], bool | None]) -> None:
    decision, _ = route(FACTS, score=0.9, gates=Gates(states), spill_enabled=spill_enabled)
    assert (decision.model, decision.policy) == ("large-m@v2", "classifier")


def test_a_small_choice_never_spills_anywhere() -> None:
    gates = Gates({("free", ModelSize.LARGE): True, ("free", ModelSize.SMALL): True})
    decision, _ = route(FACTS, score=0.1, gates=gates, spill_enabled=True)
    assert (decision.model, decision.policy) == ("small-m", "classifier")


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", ["policy.py", "difficulty.py"])
def test_the_policy_core_imports_no_django_and_no_redis(module: str) -> None:
    imported = _top_level_imports(Path(__file__).resolve().parents[2] / "model_routing" / module)
    assert not imported & {"django", "redis", "rest_framework", "numpy", "accounts", "deployments"}
