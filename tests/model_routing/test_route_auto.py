"""``route_auto`` against the real database and Redis: the tier's policy row, the deployments that are servable,
and the gate states the dispatcher publishes.

Only one small model ships (SmolLM2), so a second deployment of it, registered under another name with other engine
arguments and a higher cost per token, stands in for the large model (docs/routing.md).
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from accounts.models import Tier
from core.redis_client import get_redis
from deployments.models import ModelDeployment
from deployments.selection import resolve_model
from generation.worker_contract import WorkerHeartbeat, write_heartbeat
from model_routing.models import RoutePolicy
from model_routing.policy import RouteFacts
from model_routing.selectors import forget_route_policies, route_policy_for, tier_default_is_auto
from model_routing.services import route_auto
from runs.dispatcher_wiring import build_dispatcher
from scheduling.policy import QueuedRun
from tests.deployment_helpers import add_version, no_ready_worker

pytestmark = pytest.mark.django_db

LARGE = "smol-large"
EASY = "Hi there!"
HARD = (
    "Design a rate limiter shared by many web servers. Cover the data model, the APIs, scaling and failure "
    "handling, and prove that it never admits more than the limit."
)


def facts(text: str = EASY, *, tier: str = "free", **change: object) -> RouteFacts:
    fields: dict[str, object] = {
        "prompt_text": text,
        "prompt_tokens": 30,
        "max_tokens": 256,
        "has_tools": False,
        "structured": False,
        "tier_name": tier,
    }
    fields.update(change)
    return RouteFacts(**fields)  # type: ignore[arg-type]


def two_deployments() -> tuple[ModelDeployment, ModelDeployment]:
    """The default deployment as the small model and another SmolLM2 deployment as the large one, with every
    tier's policy naming them."""
    small = ModelDeployment.objects.get(is_default=True)
    small.cost_per_million_input_tokens, small.cost_per_million_output_tokens = Decimal("0.05"), Decimal("0.20")
    small.save()
    large = add_version(
        "v1",
        name=LARGE,
        engine_args={"max_num_seqs": 4},
        cost_per_million_input_tokens=Decimal("0.50"),
        cost_per_million_output_tokens=Decimal("2.00"),
    )
    RoutePolicy.objects.update(small_model=small.name, large_model=LARGE)
    forget_route_policies()
    return small, large


def tier(name: str) -> Tier:
    return Tier.objects.get(name=name)


def test_every_seeded_tier_has_a_policy_and_free_spills_first_by_default() -> None:
    policies = {p.tier.name: p for p in RoutePolicy.objects.select_related("tier")}
    assert set(policies) == {"pro", "plus", "free", "batch"}
    assert {name: p.spill_enabled for name, p in policies.items()} == {
        "pro": False,
        "plus": True,
        "free": True,
        "batch": False,
    }
    assert not any(p.default_model_auto for p in policies.values())


def test_a_tier_without_a_policy_row_gets_the_defaults() -> None:
    new = Tier.objects.create(
        name="trial",
        priority=5,
        bucket_capacity_tokens=1000,
        bucket_refill_per_s=1.0,
        max_concurrent_runs=1,
        max_output_tokens=256,
        queue_depth_limit=10,
        context_limit_tokens=1024,
    )
    policy = route_policy_for(tier=new)
    assert policy.pk is None and policy.enabled and not policy.spill_enabled
    assert tier_default_is_auto(tier=new) is False
    two_deployments()
    assert (
        route_auto(facts=facts(HARD, tier="trial"), tier=new).model == ModelDeployment.objects.get(is_default=True).name
    )  # no row names the candidates: both are the default deployment


def test_with_one_ready_deployment_everything_goes_to_it() -> None:
    default = ModelDeployment.objects.get(is_default=True)
    RoutePolicy.objects.update(large_model=LARGE)  # named, but not there
    for text in (EASY, HARD):
        decision = route_auto(facts=facts(text, has_tools=True), tier=tier("free"))
        assert (decision.model, decision.policy, decision.score) == (default.name, "single", None)
    assert resolve_model(decision.model).key == default.key


def test_a_large_model_without_a_ready_worker_leaves_the_small_one_single() -> None:
    small, large = two_deployments()
    add_version("v1", name="another-model")  # a third ready deployment: not the one-deployment case
    no_ready_worker(large.key)
    decision = route_auto(facts=facts(HARD), tier=tier("free"))
    assert (decision.model, decision.policy) == (small.name, "single")
    assert LARGE in decision.reason


def test_rules_then_the_classifier_pick_the_deployment() -> None:
    small, large = two_deployments()
    free = tier("free")
    tools = route_auto(facts=facts(EASY, has_tools=True), tier=free)
    assert (tools.model, tools.policy) == (LARGE, "rules")
    long_answer = route_auto(facts=facts(EASY, max_tokens=2000), tier=free)
    assert (long_answer.model, long_answer.policy) == (LARGE, "rules")
    easy = route_auto(facts=facts(EASY), tier=free)
    assert (easy.model, easy.policy) == (small.name, "classifier") and easy.score is not None and easy.score < 0.5
    hard = route_auto(facts=facts(HARD), tier=free)
    assert (hard.model, hard.policy) == (LARGE, "classifier") and hard.score is not None and hard.score >= 0.5
    assert resolve_model(hard.model).key == large.key and resolve_model(easy.model).key == small.key
    assert hard.ms >= 0.0


def test_the_admins_thresholds_apply_within_the_cache_bound() -> None:
    small, _ = two_deployments()
    free = tier("free")
    RoutePolicy.objects.filter(tier=free).update(difficulty_threshold=1.01, tools_need_large=False)
    forget_route_policies()  # what the admin's save does in its process
    decision = route_auto(facts=facts(HARD, has_tools=True), tier=free)
    assert (decision.model, decision.policy) == (small.name, "classifier")


def test_a_disabled_policy_gives_the_default_deployment() -> None:
    small, _ = two_deployments()
    RoutePolicy.objects.filter(tier__name="free").update(enabled=False, small_model=LARGE)
    forget_route_policies()
    decision = route_auto(facts=facts(HARD), tier=tier("free"))
    assert (decision.model, decision.policy) == (small.name, "disabled")


def _heartbeat(deployment: str, *, running: int, waiting: int) -> None:
    name, _, version = deployment.partition("@")
    write_heartbeat(
        WorkerHeartbeat(
            worker=f"router-test@{deployment}",
            model=name,
            model_version=version,
            max_slots=4,
            running=running,
            waiting=waiting,
            kv_cache_usage=0.0,
            tpot_s=0.05,
            active_runs=running,
            updated_at=time.time(),
            deployment=deployment,
        ),
        ttl_s=30,
        client=get_redis(),
    )


def test_spill_reads_the_gates_the_dispatcher_published_and_the_free_tier_spills_first() -> None:
    """The large deployment is full with one request waiting: the dispatcher's gate (SCHED_GATES) closes for free
    (max_waiting 1) but not for plus (2) or pro (4); the small one is idle. A hard free prompt goes to the small
    model instead of waiting; plus and pro, whose gates are open, still get the large one."""
    small, large = two_deployments()
    _heartbeat(large.key, running=4, waiting=1)
    _heartbeat(small.key, running=0, waiting=0)
    dispatcher = build_dispatcher()
    sent: list[QueuedRun] = []
    dispatcher.send = sent.append
    dispatcher.send_batch = None  # each run through the test's send, not Celery
    dispatcher.housekeeping = None  # the reaper is not what this is about
    dispatcher.tick()  # nothing queued: it only publishes the gates

    spilled = route_auto(facts=facts(HARD, tier="free"), tier=tier("free"))
    assert (spilled.model, spilled.policy) == (small.name, "spill")
    assert spilled.score is not None and spilled.score >= 0.5
    for name in ("plus", "pro"):
        decision = route_auto(facts=facts(HARD, tier=name), tier=tier(name))
        assert (decision.model, decision.policy) == (LARGE, "classifier"), name
    assert route_auto(facts=facts(EASY), tier=tier("free")).policy == "classifier"  # small anyway

    # The free tier's policy turns spill off: it waits for the large model.
    RoutePolicy.objects.filter(tier__name="free").update(spill_enabled=False)
    forget_route_policies()
    assert route_auto(facts=facts(HARD), tier=tier("free")).model == LARGE


def test_no_published_gates_means_no_spill() -> None:
    two_deployments()
    decision = route_auto(facts=facts(HARD), tier=tier("free"))
    assert (decision.model, decision.policy) == (LARGE, "classifier")
