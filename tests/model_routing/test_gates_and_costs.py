"""The web process's copy of the published gates, the deployments' cost per token, and the route policy admin."""

from __future__ import annotations

from decimal import Decimal

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import Tier
from deployments.models import ModelDeployment
from deployments.registration import RegistrationError, register_deployment
from model_routing.gates import PublishedGates
from model_routing.models import RoutePolicy
from runs.dispatcher_figures import DispatcherFigures
from scheduling.gate_state import read_gate_states


class Reads:
    def __init__(self, *states: dict[tuple[str, str], bool] | Exception) -> None:
        self.states = list(states)
        self.calls = 0

    def __call__(self) -> dict[tuple[str, str], bool]:
        self.calls += 1
        state = self.states.pop(0)
        if isinstance(state, Exception):
            raise state
        return state


def test_the_gates_are_read_at_most_once_per_cache_interval() -> None:
    now = [100.0]
    reads = Reads({("free", "m@v1"): False}, {("free", "m@v1"): True})
    gates = PublishedGates(read=reads, max_age_s=0.2, clock=lambda: now[0])
    assert gates.states() == {("free", "m@v1"): False}
    now[0] += 0.15
    assert gates.states() == {("free", "m@v1"): False} and reads.calls == 1
    now[0] += 0.1
    assert gates.states() == {("free", "m@v1"): True} and reads.calls == 2


def test_redis_down_makes_the_gates_unknown_not_an_error() -> None:
    gates = PublishedGates(read=Reads(redis.ConnectionError("down")), clock=lambda: 0.0)
    assert gates.states() == {}


def test_what_the_dispatcher_figures_write_is_what_the_router_reads(clean_redis: redis.Redis) -> None:
    figures = DispatcherFigures(deployment="m@v1", client=clean_redis)
    figures.ticked({"free": True}, {"free": 3.0}, {("free", "m@v1"): False, ("pro", "m@v1"): True})
    assert read_gate_states(clean_redis) == {("free", "m@v1"): False, ("pro", "m@v1"): True}
    clean_redis.delete("metrics:dispatcher:state")  # the TTL ran out: no dispatcher leads
    assert read_gate_states(clean_redis) == {}


@pytest.mark.django_db
@pytest.mark.parametrize("cost", ["-1", "abc", "0.00001", "1e12", "NaN"])
def test_a_bad_cost_is_refused_before_anything_is_written(cost: str) -> None:
    with pytest.raises(RegistrationError, match="cost_per_million_input_tokens"):
        register_deployment(name="costly", version="v1", source_kind="packaged", cost_per_million_input_tokens=cost)
    with pytest.raises(CommandError, match="cost_per_million_output_tokens"):
        call_command("deployment_register", "costly", "v1", "--cost-output", cost)
    assert not ModelDeployment.objects.filter(name="costly").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["auto", "Auto"])
def test_auto_is_never_a_deployments_name(name: str) -> None:
    with pytest.raises(RegistrationError, match="reserved"):
        register_deployment(name=name, version="v1", source_kind="packaged")
    assert not ModelDeployment.objects.filter(name=name).exists()


@pytest.mark.django_db
def test_costs_default_to_zero() -> None:
    row = ModelDeployment.objects.get(is_default=True)
    assert (row.cost_per_million_input_tokens, row.cost_per_million_output_tokens) == (Decimal(0), Decimal(0))


@pytest.mark.django_db
def test_the_admin_edits_a_tiers_policy_and_refuses_a_malformed_model(admin_client: Client) -> None:
    policy = RoutePolicy.objects.get(tier__name="free")
    url = f"/admin/model_routing/routepolicy/{policy.pk}/change/"
    assert admin_client.get(url).status_code == 200
    assert admin_client.get("/admin/model_routing/routepolicy/").status_code == 200
    form = {
        "tier": policy.tier_id,
        "enabled": "on",
        "small_model": "bad model!",
        "large_model": "smol-large@v1",
        "max_small_prompt_tokens": 2048,
        "max_small_output_tokens": 256,
        "tools_need_large": "on",
        "difficulty_threshold": 0.7,
        "spill_enabled": "on",
    }
    refused = admin_client.post(url, form)
    assert refused.status_code == 200 and b"name@version" in refused.content
    form["small_model"] = ""
    assert admin_client.post(url, form).status_code == 302
    policy.refresh_from_db()
    assert (policy.large_model, policy.difficulty_threshold, policy.structured_needs_large) == (
        "smol-large@v1",
        0.7,
        False,
    )
    too_high = {**form, "difficulty_threshold": 2}
    assert admin_client.post(url, too_high).status_code == 200  # refused, with the form's error
    assert Tier.objects.get(name="free").route_policy.difficulty_threshold == 0.7


@pytest.mark.django_db
def test_the_deployment_admin_shows_the_costs(admin_client: Client) -> None:
    row = ModelDeployment.objects.get(is_default=True)
    page = admin_client.get(f"/admin/deployments/modeldeployment/{row.pk}/change/")
    assert page.status_code == 200 and b"cost_per_million_output_tokens" in page.content
