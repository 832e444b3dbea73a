"""The router's policy core: pure Python, no Django, no Redis (``model_routing.services`` feeds it).

A prompt that names ``model: "auto"`` goes to one of two candidates, a small and a large deployment. The decision
is a chain of small stages (the scheduling style: one class per policy behind one interface), each seeing the facts
of the prompt and what the stages before it chose:

1. :class:`RulesStage`: what the small model must not take (tools, structured output, a long prompt, a long
   answer) goes to the large one;
2. :class:`DifficultyStage`: otherwise a learned difficulty score (``model_routing.difficulty``) at or above the
   tier's threshold goes to the large one, below it to the small one;
3. :class:`SpillStage`: a prompt bound for the large deployment goes to the small one instead while the large one's
   dispatch gate is closed for the prompt's tier (it would wait in the queue) and the small one's is not.

The chain ends with a :class:`Choice`; the service turns it into a :class:`RouteDecision` naming the deployment.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol


class ModelSize(StrEnum):
    SMALL = "small"
    LARGE = "large"


class RoutePolicyName(StrEnum):
    """Which policy made the decision (the strings are recorded on the run and shown to operators)."""

    RULES = "rules"
    CLASSIFIER = "classifier"
    SPILL = "spill"
    SINGLE = "single"
    """Only one candidate is servable (one ready deployment, or small and large name the same one)."""
    DISABLED = "disabled"
    """The tier's route policy is off: the default deployment serves."""


@dataclass(frozen=True)
class RouteFacts:
    """What the router knows of one prompt, gathered by the caller before the run is queued."""

    prompt_text: str
    """The text the difficulty score reads: the new user message (not the whole history)."""
    prompt_tokens: int
    """The whole prompt as the engine sees it (history and system message included)."""
    max_tokens: int
    """The answer budget the client asked for (``max_tokens``); 0 when it sent none: the tier's cap says nothing
    about this prompt, and passing it would send every prompt of a tier whose cap is above
    ``max_small_output_tokens`` (pro's 2048) to the large model."""
    has_tools: bool
    structured: bool
    """A ``response_format`` json_schema / json_object, or structured outputs of any kind."""
    tier_name: str


@dataclass(frozen=True)
class RouteDecision:
    model: str
    """``name`` or ``name@version``: what the caller resolves with ``deployments.selection.resolve_model``."""
    policy: str
    """A :class:`RoutePolicyName` value."""
    reason: str
    """Human-readable: why this deployment (for the run's record and the admin)."""
    score: float | None
    """The difficulty score, when the classifier ran."""
    ms: float
    """Time the decision took, milliseconds (the pass's cost per prompt)."""


@dataclass(frozen=True)
class RouterConfig:
    """One tier's thresholds (from its ``RoutePolicy`` row)."""

    max_small_prompt_tokens: int = 1024
    """A prompt longer than this (tokens, history included) goes to the large model."""
    max_small_output_tokens: int = 512
    """An answer budget (``max_tokens``) above this goes to the large model."""
    tools_need_large: bool = True
    structured_needs_large: bool = True
    difficulty_threshold: float = 0.5
    """The classifier's probability of "hard" at or above which the large model serves (0..1; above 1: never)."""
    spill_enabled: bool = False
    """While the large model's gate is closed for this tier, its prompts go to the small one instead of waiting."""


@dataclass(frozen=True)
class Choice:
    size: ModelSize
    policy: RoutePolicyName
    reason: str
    score: float | None = None


class DifficultyScorer(Protocol):
    def score(self, text: str) -> float:
        """The probability that ``text`` is a hard prompt (0..1)."""
        ...


class GateView(Protocol):
    def closed(self, tier: str, size: ModelSize) -> bool | None:
        """Whether the dispatcher's gate of the ``size`` candidate is closed for ``tier`` now (None: unknown, e.g.
        no dispatcher published lately or no worker of it reported)."""
        ...


class RouteStage(Protocol):
    """One policy of the chain: returns the choice so far (``chosen``), a new one, or None (no opinion yet)."""

    def apply(self, facts: RouteFacts, chosen: Choice | None) -> Choice | None: ...


@dataclass(frozen=True)
class RulesStage:
    config: RouterConfig

    def apply(self, facts: RouteFacts, chosen: Choice | None) -> Choice | None:
        if chosen is not None:
            return chosen
        c = self.config
        reason = None
        if c.tools_need_large and facts.has_tools:
            reason = "tools are offered"
        elif c.structured_needs_large and facts.structured:
            reason = "structured output is required"
        elif facts.prompt_tokens > c.max_small_prompt_tokens:
            reason = f"prompt of {facts.prompt_tokens} tokens > {c.max_small_prompt_tokens}"
        elif facts.max_tokens > c.max_small_output_tokens:
            reason = f"max_tokens {facts.max_tokens} > {c.max_small_output_tokens}"
        return None if reason is None else Choice(ModelSize.LARGE, RoutePolicyName.RULES, reason)


@dataclass(frozen=True)
class DifficultyStage:
    scorer: DifficultyScorer
    threshold: float

    def apply(self, facts: RouteFacts, chosen: Choice | None) -> Choice | None:
        if chosen is not None:
            return chosen
        score = self.scorer.score(facts.prompt_text)
        hard = score >= self.threshold
        reason = f"difficulty {score:.2f} {'>=' if hard else '<'} {self.threshold:.2f}"
        return Choice(ModelSize.LARGE if hard else ModelSize.SMALL, RoutePolicyName.CLASSIFIER, reason, score)


@dataclass(frozen=True)
class SpillStage:
    gates: GateView
    enabled: bool

    def apply(self, facts: RouteFacts, chosen: Choice | None) -> Choice | None:
        if not self.enabled or chosen is None or chosen.size is not ModelSize.LARGE:
            return chosen
        if self.gates.closed(facts.tier_name, ModelSize.LARGE) is not True:
            return chosen
        if self.gates.closed(facts.tier_name, ModelSize.SMALL) is True:
            return chosen  # both full: spilling would only wait elsewhere
        reason = f"large model's gate closed for {facts.tier_name} (was: {chosen.reason})"
        return replace(chosen, size=ModelSize.SMALL, policy=RoutePolicyName.SPILL, reason=reason)


class Router:
    """The chain of stages; a prompt that no stage placed goes to the small model."""

    def __init__(self, stages: Sequence[RouteStage]) -> None:
        self.stages = tuple(stages)

    def choose(self, facts: RouteFacts) -> Choice:
        chosen: Choice | None = None
        for stage in self.stages:
            chosen = stage.apply(facts, chosen)
        return chosen or Choice(ModelSize.SMALL, RoutePolicyName.CLASSIFIER, "no stage placed it")


def build_router(config: RouterConfig, *, scorer: DifficultyScorer, gates: GateView) -> Router:
    """The chain in its fixed order: rules, classifier, spill."""
    return Router(
        [
            RulesStage(config),
            DifficultyStage(scorer, config.difficulty_threshold),
            SpillStage(gates, config.spill_enabled),
        ]
    )


def decide(router: Router, facts: RouteFacts, *, small: str, large: str) -> RouteDecision:
    """``router``'s choice for ``facts`` as a decision naming ``small`` or ``large`` (and its time)."""
    started = time.perf_counter()
    choice = router.choose(facts)
    model = large if choice.size is ModelSize.LARGE else small
    return RouteDecision(
        model=model,
        policy=choice.policy.value,
        reason=choice.reason,
        score=choice.score,
        ms=(time.perf_counter() - started) * 1000.0,
    )
