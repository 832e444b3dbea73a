"""Reads for the router: each tier's route policy (its row, or the defaults when it has none), kept per process.

A web process re-reads the policies at most every ``DEPLOYMENT_CACHE_S`` (as it does the deployments), so routing
costs no query per prompt; an admin's edit reaches every process within that bound (this one at once).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from accounts.models import Tier
from deployments.selection import Snapshot
from model_routing.defaults import default_policy_fields
from model_routing.models import RoutePolicy
from model_routing.policy import RouterConfig


@dataclass(frozen=True)
class TierRouting:
    """A snapshot of one tier's ``RoutePolicy`` (no database access through it)."""

    enabled: bool
    default_model_auto: bool
    small_model: str
    large_model: str
    config: RouterConfig


def _routing(policy: RoutePolicy) -> TierRouting:
    return TierRouting(
        enabled=policy.enabled,
        default_model_auto=policy.default_model_auto,
        small_model=policy.small_model.strip(),
        large_model=policy.large_model.strip(),
        config=RouterConfig(
            max_small_prompt_tokens=policy.max_small_prompt_tokens,
            max_small_output_tokens=policy.max_small_output_tokens,
            tools_need_large=policy.tools_need_large,
            structured_needs_large=policy.structured_needs_large,
            difficulty_threshold=policy.difficulty_threshold,
            spill_enabled=policy.spill_enabled,
        ),
    )


def route_policy_for(*, tier: Tier) -> RoutePolicy:
    """The tier's policy row, or an unsaved one with the defaults (a tier created after the data migration)."""
    found = RoutePolicy.objects.filter(tier=tier).first()
    return found or RoutePolicy(tier=tier, **default_policy_fields(tier.name))


def _read_policies() -> dict[int, TierRouting]:
    return {p.tier_id: _routing(p) for p in RoutePolicy.objects.all()}


_policies = Snapshot(_read_policies, lambda: settings.DEPLOYMENTS.cache_s)


def tier_routing(*, tier: Tier) -> TierRouting:
    """The tier's routing as of at most ``DEPLOYMENT_CACHE_S`` ago."""
    found: TierRouting | None = _policies.get().get(tier.pk)
    return found or _routing(RoutePolicy(tier=tier, **default_policy_fields(tier.name)))


def tier_default_is_auto(*, tier: Tier) -> bool:
    """Whether a prompt of this tier that names no model goes through the router (``default_model_auto``)."""
    return tier_routing(tier=tier).default_model_auto


def forget_route_policies() -> None:
    """The next read goes to Postgres (after an admin edit, and between tests)."""
    _policies.clear()
