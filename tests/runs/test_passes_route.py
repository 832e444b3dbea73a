"""The routing pass before the queue (``runs.passes.route``): ``model: "auto"`` is routed by the tier's policy and
the run names the deployment that serves it; a pinned model is never rerouted; a tier whose default is ``auto``
routes prompts that name no model. A second SmolLM2 deployment stands in for the large model (docs/routing.md)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat
from deployments.models import ModelDeployment
from model_routing.defaults import default_policy_fields
from model_routing.models import RoutePolicy
from model_routing.selectors import forget_route_policies
from runs.models import Run
from tests.deployment_helpers import add_version
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db

LARGE = "smol-large"
HARD = (
    "Design a rate limiter shared by many web servers. Cover the data model, the APIs, scaling and failure "
    "handling, and prove that it never admits more than the limit."
)


@pytest.fixture(autouse=True)
def fresh_policies() -> Any:
    forget_route_policies()
    yield
    forget_route_policies()


def two_deployments(user: User) -> tuple[ModelDeployment, ModelDeployment]:
    """The default deployment as the small model, another SmolLM2 deployment as the large one, in the user's tier's
    policy (the test's tiers are made afresh: the policy row is written here)."""
    small = ModelDeployment.objects.get(is_default=True)
    large = add_version("v1", name=LARGE, engine_args={"max_num_seqs": 4})
    RoutePolicy.objects.update_or_create(
        tier=user.tier,
        defaults={**default_policy_fields(user.tier.name), "small_model": small.name, "large_model": LARGE},
    )
    forget_route_policies()
    return small, large


def post(api: APIClient, chat: Chat, **body: Any) -> Run:
    resp = api.post(f"/api/chats/{chat.pk}/messages", body, format="json")
    assert resp.status_code == 202, resp.content
    return Run.objects.select_related("deployment").get(pk=resp.json()["run"]["id"])


def route_record(run: Run) -> dict[str, Any] | None:
    found = [p for p in run.passes if p["pass"] == "route"]
    return found[0] if found else None


def test_auto_with_one_deployment_goes_to_it_and_says_so(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)

    run = post(api, chat, content="Hi there!", model="auto")

    default = ModelDeployment.objects.get(is_default=True)
    assert run.deployment_id == default.pk and run.model == default.name
    record = route_record(run)
    assert (
        record is not None and record["policy"] == "single" and record["model"] == f"{default.name}@{default.version}"
    )
    assert Chat.objects.get(pk=chat.pk).model == "auto"  # the chat keeps asking the router


def test_auto_routes_a_hard_prompt_large_and_an_easy_one_small(api: APIClient, user: User) -> None:
    small, large = two_deployments(user)
    hard_chat, easy_chat = ChatFactory.create(owner=user), ChatFactory.create(owner=user)

    hard = post(api, hard_chat, content=HARD, model="auto")
    easy = post(api, easy_chat, content="Hi there!", model="auto")

    assert hard.deployment_id == large.pk, str(route_record(hard))
    assert route_record(hard)["decision"] == f"{LARGE}@v1"  # type: ignore[index]
    assert easy.deployment_id == small.pk
    assert route_record(hard)["policy"] in ("rules", "classifier")  # type: ignore[index]


def test_a_pinned_model_is_never_rerouted(api: APIClient, user: User) -> None:
    small, _ = two_deployments(user)
    chat = ChatFactory.create(owner=user)

    run = post(api, chat, content=HARD, model=small.name)

    assert run.deployment_id == small.pk and route_record(run) is None


def test_a_tier_whose_default_is_auto_routes_prompts_naming_no_model(api: APIClient, user: User) -> None:
    _, large = two_deployments(user)
    RoutePolicy.objects.filter(tier=user.tier).update(default_model_auto=True)  # written by two_deployments
    forget_route_policies()
    chat = ChatFactory.create(owner=user)

    run = post(api, chat, content=HARD)

    assert run.deployment_id == large.pk and route_record(run) is not None


def test_regenerating_an_auto_chat_routes_again(api: APIClient, user: User) -> None:
    _, large = two_deployments(user)
    chat = ChatFactory.create(owner=user)
    first = post(api, chat, content=HARD, model="auto")
    Run.objects.filter(pk=first.pk).update(status="done")

    resp = api.post(f"/api/chats/{chat.pk}/regenerate", format="json")

    assert resp.status_code == 201, resp.content
    again = Run.objects.get(pk=resp.json()["id"])
    assert again.deployment_id == large.pk and route_record(again) is not None
