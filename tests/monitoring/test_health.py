"""Liveness (/healthz) and readiness (/readyz: the database, Redis and the model's tokenizer)."""

from __future__ import annotations

import dataclasses
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from pytest_django.fixtures import Settings

from core.redis_client import get_redis
from deployments.readiness import load_tokenizers
from deployments.tokenizer import ModelNotReady, get_tokenizer


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_down(settings: Settings, closed_port: int) -> Iterator[None]:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port}/3"
    get_redis.cache_clear()
    yield
    get_redis.cache_clear()


def test_healthz_answers_without_dependencies(redis_down: None) -> None:
    resp = Client().get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_200_when_database_redis_and_tokenizer_are_up() -> None:
    get_tokenizer()
    resp = Client().get("/readyz")
    assert resp.status_code == 200
    tokenizer = f"tokenizer:{settings.ENGINE.served_model_name}"
    assert resp.json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": "ok", tokenizer: "ok"},
        "workers_ready": 0,
    }


@pytest.mark.django_db
def test_readyz_503_names_a_model_that_is_not_there_yet(settings: Settings, tmp_path: Path) -> None:
    settings.ENGINE = dataclasses.replace(settings.ENGINE, model=str(tmp_path / "not-yet"))
    with pytest.raises(ModelNotReady):
        get_tokenizer()
    resp = Client().get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "not ready" and body["checks"]["database"] == "ok"
    assert "does not exist yet" in body["checks"][f"tokenizer:{settings.ENGINE.served_model_name}"]


@pytest.mark.django_db
def test_readyz_503_when_redis_is_down(redis_down: None) -> None:
    resp = Client().get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "not ready"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("error: ")


@pytest.mark.django_db
def test_unknown_api_path_is_a_json_404() -> None:
    resp = Client().get("/api/no-such-thing")
    assert resp.status_code == 404
    assert resp.json() == {"error": {"code": "not_found", "message": "No such endpoint."}}
    assert Client().get("/no-such-page/").status_code == 404


@pytest.fixture
def default_in_own_folder(tmp_path: Path) -> Iterator[str]:
    """The default deployment's copy is a folder of its own (registered from a store, say): its tokenizer files,
    copied from the served model's folder (the weights are not read by a web process)."""
    from deployments.models import ModelDeployment
    from deployments.selection import forget_cached

    source = Path(settings.ENGINE.model_path)
    folder = tmp_path / "SmolLM2@store"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    default = ModelDeployment.objects.get(is_default=True)
    ModelDeployment.objects.filter(pk=default.pk).update(local_path=str(folder))
    forget_cached()
    yield f"tokenizer:{default.name}@{default.version}"
    forget_cached()


@pytest.mark.django_db
def test_readyz_waits_for_the_default_deployments_own_tokenizer(default_in_own_folder: str) -> None:
    """A web process is ready once the default deployment's copy's tokenizer is loaded too, which the lifespan
    startup's ``load_tokenizers`` does: until then its prompts would be answered 503."""
    get_tokenizer()
    resp = Client().get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["checks"][default_in_own_folder] == "not loaded yet"
    assert load_tokenizers() == []
    resp = Client().get("/readyz")
    assert resp.status_code == 200, resp.json()
    assert resp.json()["checks"][default_in_own_folder] == "ok"
