"""``route_auto``: which deployment serves a prompt that names ``model: "auto"`` (or names nothing while its tier's
default is ``auto``).

The caller (the run pipeline, before the run is queued) gathers :class:`RouteFacts`, calls :func:`route_auto` and
resolves ``decision.model`` with ``deployments.selection.resolve_model`` as it would a client's ``model``. A pinned
``name`` or ``name@version`` is never rerouted: the caller does not call the router for it.

The tier's policy names a small and a large candidate (empty: the default deployment). When only one of them is
servable (one ready generation deployment, both naming the same model, or one without a ready worker) it serves,
policy ``single``; a disabled policy gives the default deployment, policy ``disabled``. Otherwise the policy core
(``model_routing.policy``) decides: rules, the difficulty score, load-aware spill.
"""

from __future__ import annotations

import time
from dataclasses import replace

from accounts.models import Tier
from core.errors import DomainError
from deployments.models import DeploymentKind
from deployments.selection import AUTO_MODEL, default_deployment, parse_model, ready_workers, served_deployments
from model_routing.difficulty import default_model
from model_routing.gates import CandidateGates, published_gates
from model_routing.policy import RouteDecision, RouteFacts, RoutePolicyName, build_router, decide
from model_routing.selectors import tier_routing

__all__ = ["AUTO_MODEL", "RouteDecision", "RouteFacts", "route_auto", "serving_keys"]


def serving_keys(spec: str) -> list[str]:
    """The ``name@version`` keys that would serve ``spec`` now: ready generation versions with a ready worker (for a
    name, those with traffic weight, else its newest ready one, as ``resolve_model`` picks); [] when none or when
    ``spec`` is not a model."""
    try:
        name, version = parse_model(spec)
    except DomainError:
        return []
    versions = [
        d
        for d in served_deployments()
        if d.name == name and d.kind == DeploymentKind.GENERATE and d.is_ready and version in (None, d.version)
    ]
    if version is None:
        versions = [d for d in versions if d.traffic_weight > 0] or versions[:1]
    return [d.key for d in versions if ready_workers(d.key) > 0]


def _single(model: str, reason: str, started: float, policy: RoutePolicyName = RoutePolicyName.SINGLE) -> RouteDecision:
    ms = (time.perf_counter() - started) * 1000.0
    return RouteDecision(model=model, policy=policy.value, reason=reason, score=None, ms=ms)


def route_auto(*, facts: RouteFacts, tier: Tier) -> RouteDecision:
    """The deployment (``name`` or ``name@version``) that serves this ``auto`` prompt, and why.

    Reads only per-process snapshots (policies, deployments, ready workers, published gates): no query and no Redis
    round trip on most calls. Never raises for a missing candidate: it names what the default would be, and
    ``resolve_model`` answers the usual 503 when nothing can serve.
    """
    started = time.perf_counter()
    routing = tier_routing(tier=tier)
    default = default_deployment()
    default_name = default.name if default is not None else ""
    if not routing.enabled:
        return _single(default_name, f"routing is off for {tier.name}", started, RoutePolicyName.DISABLED)
    ready = [
        d for d in served_deployments() if d.kind == DeploymentKind.GENERATE and d.is_ready and ready_workers(d.key)
    ]
    if len(ready) <= 1:
        only = ready[0].name if ready else default_name
        return _single(only, "one ready generation deployment" if ready else "no ready deployment", started)
    small = routing.small_model or default_name
    large = routing.large_model or default_name
    small_keys, large_keys = serving_keys(small), serving_keys(large)
    if small == large or not small_keys or not large_keys:
        if small == large:
            return _single(small, f"small and large are both {small!r}", started)
        if not small_keys and not large_keys:
            return _single(default_name, f"neither {small!r} nor {large!r} has a ready worker", started)
        model, missing = (large, small) if large_keys else (small, large)
        return _single(model, f"{missing!r} has no ready worker", started)
    gates = CandidateGates(states=published_gates.states(), small=small_keys, large=large_keys)
    router = build_router(routing.config, scorer=default_model(), gates=gates)
    decision = decide(router, facts, small=small, large=large)
    return replace(decision, ms=(time.perf_counter() - started) * 1000.0)
