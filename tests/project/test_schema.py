"""The OpenAPI schema (drf-spectacular) and the interactive docs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

DOCUMENTED = {
    ("/api/auth/token", "post"),
    ("/api/models", "get"),
    ("/api/chats", "get"),
    ("/api/chats", "post"),
    ("/api/chats/{chat_id}", "get"),
    ("/api/chats/{chat_id}", "patch"),
    ("/api/chats/{chat_id}", "delete"),
    ("/api/chats/{chat_id}/messages", "get"),
    ("/api/chats/{chat_id}/messages", "post"),
    ("/api/runs/{run_id}", "get"),
    ("/api/runs/{run_id}/cancel", "post"),
}


def test_schema_is_a_valid_openapi_document() -> None:
    resp = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert resp.status_code == 200
    schema = resp.json()
    validate_schema(schema)  # raises on an invalid document
    assert schema["openapi"].startswith("3.")
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
    assert DOCUMENTED <= operations
    ids = [op["operationId"] for item in schema["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_schema_yaml_by_default() -> None:
    resp = Client().get("/api/schema/")
    assert resp.status_code == 200
    schema = yaml.safe_load(resp.content)
    assert "/api/chats" in schema["paths"]


def test_prompt_endpoint_documents_its_answers() -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    responses = schema["paths"]["/api/chats/{chat_id}/messages"]["post"]["responses"]
    assert {"202", "400", "404", "409", "429"} <= set(responses)
    pagination = {p["name"] for p in schema["paths"]["/api/chats"]["get"]["parameters"]}
    assert {"cursor", "limit"} <= pagination


def test_docs_page_loads() -> None:
    resp = Client().get("/api/docs/")
    assert resp.status_code == 200
    assert b"swagger" in resp.content.lower()


def test_schema_generates_without_warnings(tmp_path: Path) -> None:
    """Every API view is annotated well enough for drf-spectacular (an unannotated one degrades the docs)."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert (tmp_path / "schema.yml").stat().st_size > 0
