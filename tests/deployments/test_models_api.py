"""``GET /api/models`` (what a chat may name), and a chat's ``model`` through the chat endpoints: refused before
anything is written when it names nothing served (404), is malformed (400) or has no ready worker (503)."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import DjangoAssertNumQueries, Settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message
from deployments.models import DeploymentStatus, ModelDeployment
from runs.models import Run
from tests.deployment_helpers import add_version, no_ready_worker
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db

WRITES = ("INSERT", "UPDATE", "DELETE")


@pytest.fixture
def v1() -> ModelDeployment:
    return ModelDeployment.objects.get(is_default=True)


def _version(
    v1: ModelDeployment, version: str, *, weight: int, workers: int, default: bool = False
) -> dict[str, object]:
    return {
        "id": f"{v1.name}@{version}",
        "version": version,
        "status": "ready",
        "traffic_weight": weight,
        "ready_workers": workers,
        "is_default": default,
    }


def test_lists_each_ready_name_with_its_ready_versions_newest_first(api: APIClient, v1: ModelDeployment) -> None:
    add_version("v2", weight=30)
    add_version("v3", weight=0, worker=False)  # ready, but no worker yet: listed, with 0 ready workers
    other = add_version("v1", name="other-model", weight=100)

    resp = api.get("/api/models")

    assert resp.status_code == 200, resp.content
    assert resp.json() == {
        "default": v1.name,
        "auto": True,
        "results": sorted(
            [
                {
                    "id": v1.name,
                    "versions": [
                        _version(v1, "v3", weight=0, workers=0),
                        _version(v1, "v2", weight=30, workers=1),
                        _version(v1, "v1", weight=100, workers=1, default=True),
                    ],
                },
                {
                    "id": "other-model",
                    "versions": [
                        {
                            "id": other.key,
                            "version": "v1",
                            "status": "ready",
                            "traffic_weight": 100,
                            "ready_workers": 1,
                            "is_default": False,
                        }
                    ],
                },
            ],
            key=lambda model: str(model["id"]),
        ),
    }


@pytest.mark.parametrize(
    "status",
    [
        DeploymentStatus.REGISTERED,
        DeploymentStatus.MATERIALIZING,
        DeploymentStatus.DRAINING,
        DeploymentStatus.RETIRED,
        DeploymentStatus.FAILED,
    ],
)
def test_versions_that_are_not_ready_are_not_listed(api: APIClient, v1: ModelDeployment, status: str) -> None:
    add_version("v2", weight=30, status=status)
    add_version("v1", name="unready-model", status=status)  # a name with no ready version is not listed at all

    models = api.get("/api/models").json()["results"]

    assert [model["id"] for model in models] == [v1.name]
    assert [version["id"] for version in models[0]["versions"]] == [v1.key]


def test_the_default_name_is_given_even_while_it_has_no_ready_version(api: APIClient, v1: ModelDeployment) -> None:
    add_version("v1", name="other-model", weight=100)
    ModelDeployment.objects.filter(pk=v1.pk).update(status=DeploymentStatus.DRAINING)
    no_ready_worker(v1.key)  # clears the snapshot too

    body = api.get("/api/models").json()

    assert body["default"] == v1.name
    assert [model["id"] for model in body["results"]] == ["other-model"]


def test_the_listing_reads_the_snapshot_not_the_database(
    api: APIClient, settings: Settings, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    settings.DEPLOYMENTS = dataclasses.replace(settings.DEPLOYMENTS, cache_s=600.0, workers_cache_s=600.0)
    first = api.get("/api/models").json()  # refreshes the snapshot
    with django_assert_num_queries(0):
        again = api.get("/api/models").json()
    assert again == first


def test_anonymous_is_refused(db: None) -> None:
    assert APIClient().get("/api/models").status_code in (401, 403)


def test_a_token_is_enough(user: User) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    assert client.get("/api/models").status_code == 200


def test_the_schema_documents_the_endpoint(db: None) -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/models"]["get"]
    assert operation["operationId"] == "models_list"
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    listing = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert set(listing["properties"]) == {"default", "results", "auto"}


# A chat's model, through the chat endpoints.


def test_create_chat_with_an_unknown_model_is_a_404_naming_the_available_ones(
    api: APIClient, v1: ModelDeployment
) -> None:
    add_version("v2", weight=30)
    resp = api.post("/api/chats", {"title": "t", "model": "no-such-model"}, format="json")
    assert resp.status_code == 404
    error = resp.json()["error"]
    assert error["code"] == "model_not_found"
    assert "no-such-model" in error["message"]
    assert all(name in error["message"] for name in (v1.name, v1.key, f"{v1.name}@v2"))
    assert not Chat.objects.exists()


def test_create_chat_with_an_unserved_version_is_a_404(api: APIClient, v1: ModelDeployment) -> None:
    add_version("v2", status=DeploymentStatus.RETIRED)
    resp = api.post("/api/chats", {"model": f"{v1.name}@v2"}, format="json")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"
    assert not Chat.objects.exists()


@pytest.mark.parametrize("model", ["a@b@c", "has space", "@v1", "name@"])
def test_create_chat_with_a_malformed_model_is_a_400(api: APIClient, model: str) -> None:
    resp = api.post("/api/chats", {"model": model}, format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid" and "name@version" in error["fields"]["model"][0]  # the schema's pattern
    assert not Chat.objects.exists()


def test_create_chat_pinned_to_a_version_stores_it(api: APIClient, user: User, v1: ModelDeployment) -> None:
    v2 = add_version("v2", weight=30)
    resp = api.post("/api/chats", {"title": "pinned", "model": f" {v2.key} "}, format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["model"] == v2.key
    assert Chat.objects.get(pk=resp.json()["id"], owner=user).model == v2.key


def test_create_chat_without_a_model_keeps_it_empty_the_default(api: APIClient) -> None:
    resp = api.post("/api/chats", {}, format="json")
    assert resp.status_code == 201
    assert resp.json()["model"] == ""


def test_patch_changes_the_model_and_refuses_an_unknown_one(api: APIClient, user: User, v1: ModelDeployment) -> None:
    v2 = add_version("v2", weight=30)
    chat = ChatFactory.create(owner=user, title="keep")

    resp = api.patch(f"/api/chats/{chat.pk}", {"model": v2.key}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["model"] == v2.key
    assert api.get(f"/api/chats/{chat.pk}").json()["model"] == v2.key

    refused = api.patch(f"/api/chats/{chat.pk}", {"model": "no-such-model", "title": "changed"}, format="json")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"
    chat.refresh_from_db()
    assert (chat.model, chat.title) == (v2.key, "keep")

    back = api.patch(f"/api/chats/{chat.pk}", {"model": ""}, format="json")
    assert back.status_code == 200
    chat.refresh_from_db()
    assert chat.model == ""


def test_a_message_pinned_to_v2_runs_on_v2_and_the_chat_keeps_it(
    api: APIClient, user: User, v1: ModelDeployment
) -> None:
    v2 = add_version("v2", weight=30)
    chat = ChatFactory.create(owner=user)

    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hi", "model": v2.key}, format="json")

    assert resp.status_code == 202, resp.content
    run = Run.objects.select_related("deployment").get(pk=resp.json()["run"]["id"])
    assert run.deployment is not None
    assert run.deployment.key == v2.key
    chat.refresh_from_db()
    assert chat.model == v2.key
    assert api.get(f"/api/chats/{chat.pk}").json()["model"] == v2.key


def test_a_message_to_a_model_without_a_ready_worker_is_a_503_and_writes_nothing(
    api: APIClient, user: User, v1: ModelDeployment
) -> None:
    v2 = add_version("v2", weight=30)
    no_ready_worker(v2.key)
    chat = ChatFactory.create(owner=user, title="")

    with CaptureQueriesContext(connection) as queries:
        resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hi", "model": v2.key}, format="json")

    assert resp.status_code == 503, resp.content
    assert resp.json()["error"]["code"] == "model_unavailable"
    assert v2.key in resp.json()["error"]["message"]
    assert int(resp["Retry-After"]) > 0
    assert not Message.objects.filter(chat=chat).exists()
    assert not Run.objects.filter(chat=chat).exists()
    chat.refresh_from_db()
    assert (chat.model, chat.title) == ("", "")
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]
    assert writes == []
