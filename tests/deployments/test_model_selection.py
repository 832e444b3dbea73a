"""Which deployment a request's ``model`` picks, and the refusals that write nothing (``deployments.selection``)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.authtoken.models import Token

from accounts.models import User
from chats.models import Chat
from deployments.models import DeploymentKind, DeploymentStatus, ModelDeployment
from deployments.selection import (
    InvalidModel,
    ModelNotFound,
    ModelUnavailable,
    available_models,
    forget_cached,
    resolve_model,
)
from openai_api.requests import parse_chat_completion
from openai_api.services import chat_completion_create
from runs.models import Run
from tests.deployment_helpers import add_version, no_ready_worker

NAME = settings.ENGINE.served_model_name


def set_weight(version: str, weight: int) -> None:
    ModelDeployment.objects.filter(name=NAME, version=version).update(traffic_weight=weight)
    forget_cached()


@pytest.mark.django_db
def test_no_model_is_the_default_and_a_pin_is_that_version() -> None:
    add_version("v2", weight=0)
    assert resolve_model(None).key == f"{NAME}@v1"
    assert resolve_model("  ").key == f"{NAME}@v1"
    assert resolve_model(f"{NAME}@v2").key == f"{NAME}@v2"  # pinned: served though its weight is 0
    assert resolve_model(NAME).key == f"{NAME}@v1"  # by name: only versions that take traffic


@pytest.mark.django_db
def test_a_name_splits_by_weight_within_a_bound_derived_from_n() -> None:
    add_version("v2", weight=30)
    set_weight("v1", 70)
    n, p = 4000, 0.3
    rng = random.Random(20261201)
    picked = sum(resolve_model(NAME, rng=rng).version == "v2" for _ in range(n))
    # Binomial(n, p): the count stays within 4.5 standard deviations of n*p except with probability < 1e-5.
    bound = 4.5 * math.sqrt(n * p * (1 - p))
    assert abs(picked - n * p) <= bound, (picked, n * p, bound)
    assert 0 < picked < n


@pytest.mark.django_db
def test_a_version_without_a_ready_worker_gets_none_of_the_names_traffic() -> None:
    add_version("v2", weight=50, worker=False)
    set_weight("v1", 50)
    rng = random.Random(1)
    assert {resolve_model(NAME, rng=rng).version for _ in range(200)} == {"v1"}
    with pytest.raises(ModelUnavailable, match="no ready worker") as refused:
        resolve_model(f"{NAME}@v2")
    assert refused.value.status_code == 503 and refused.value.headers["Retry-After"]
    no_ready_worker(f"{NAME}@v1")
    with pytest.raises(ModelUnavailable):
        resolve_model(NAME)


@pytest.mark.django_db
def test_all_weights_zero_serve_the_newest_ready_version() -> None:
    add_version("v2", weight=0)
    set_weight("v1", 0)
    assert resolve_model(NAME).version == "v2"


@pytest.mark.django_db
@pytest.mark.parametrize("spec", ["a@b@c", "@v1", f"{NAME}@", "has space", "x" * 300, "ü@v1"])
def test_a_malformed_model_is_a_400_naming_the_models_there_are(spec: str) -> None:
    with pytest.raises(InvalidModel) as refused:
        resolve_model(spec)
    assert refused.value.status_code == 400 and refused.value.code == "invalid_model"
    assert NAME in refused.value.message


@pytest.mark.django_db
@pytest.mark.parametrize("status", [DeploymentStatus.RETIRED, DeploymentStatus.FAILED, DeploymentStatus.DRAINING])
def test_an_unknown_or_unserved_version_is_model_not_found(status: str) -> None:
    add_version("v2", weight=0, status=status)
    for spec in ("no-such-model", f"{NAME}@v9", f"{NAME}@v2"):
        with pytest.raises(ModelNotFound) as refused:
            resolve_model(spec)
        assert refused.value.status_code == 404 and refused.value.code == "model_not_found"
        available = refused.value.message.split("Available: ", 1)[1].rstrip(".").split(", ")
        assert {NAME, f"{NAME}@v1", "auto"} <= set(available) and f"{NAME}@v2" not in available
    assert available_models() == [NAME, f"{NAME}@v1", "auto"]
    assert "auto" not in available_models(DeploymentKind.EMBED)  # `auto` routes text generation only


@pytest.mark.django_db
def test_a_version_still_materializing_is_a_503() -> None:
    add_version("v2", weight=0, status=DeploymentStatus.MATERIALIZING)
    with pytest.raises(ModelUnavailable, match="being prepared"):
        resolve_model(f"{NAME}@v2")


# The OpenAI-compatible API: the refusals come before anything is written. -------------------------------------------


def v1_post(client: Client, user: User, path: str, body: dict[str, Any]) -> Any:
    token = Token.objects.get_or_create(user=user)[0].key
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("no-such-model", 404, "model_not_found"),
        (f"{NAME}@v9", 404, "model_not_found"),
        ("a@b@c", 400, "invalid_model"),
        (f"{NAME}@v2", 503, "model_unavailable"),  # registered, and no worker of it is ready
    ],
)
def test_v1_refuses_a_model_it_cannot_serve_and_writes_nothing(user: User, model: str, status: int, code: str) -> None:
    add_version("v2", weight=0, worker=False)
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": "hi", "max_tokens": 4})):
        resp = v1_post(Client(), user, path, {**body, "model": model})
        assert resp.status_code == status, resp.content
        error = resp.json()["error"]
        assert error["code"] == code and error["param"] == "model"
        if status == 503:
            assert resp["Retry-After"]
        if status == 404:
            assert f"{NAME}@v1" in error["message"]
    assert not Run.objects.exists() and not Chat.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_v1_models_lists_each_name_and_each_ready_version(user: User) -> None:
    add_version("v2", weight=0)
    add_version("v0", weight=0, status=DeploymentStatus.RETIRED)
    token = Token.objects.create(user=user).key
    resp = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert [m["id"] for m in resp.json()["data"]] == [NAME, f"{NAME}@v1", f"{NAME}@v2", "auto"]


@pytest.mark.django_db
def test_a_pinned_call_records_the_deployment_that_serves_it(user: User) -> None:
    v2 = add_version("v2", weight=0)
    request = parse_chat_completion({**CHAT, "model": f"{NAME}@v2", "n": 2})
    runs = chat_completion_create(user=user, request=request, deployment=resolve_model(request.model))
    assert [run.deployment_id for run in runs] == [v2.pk, v2.pk]
    assert {run.model for run in runs} == {NAME}
