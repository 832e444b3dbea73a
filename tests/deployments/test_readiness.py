"""A prompt for a model that is not ready yet is a 503 with ``Retry-After`` that writes nothing, never a 500; a
web process loads the tokenizer before it accepts a connection, and picks the model up once it is prepared."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from pytest_django.fixtures import Settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from bench.lib.processes import ROOT, child_env, free_port, stop_process_group
from chats.models import Message
from deployments.models import ModelDeployment
from deployments.selection import forget_cached
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, UserFactory

LOGS = ROOT / "artifacts" / "stack-logs"


@pytest.fixture
def model_not_there(settings: Settings, tmp_path: Path) -> Path:
    """The served model points at a folder that ``prepare_model`` has not written yet."""
    missing = tmp_path / "models" / "SmolLM2-135M-Instruct"
    settings.ENGINE = dataclasses.replace(settings.ENGINE, model=str(missing))
    # The default deployment's copy is what a prompt is tokenized with.
    ModelDeployment.objects.filter(is_default=True).update(local_path=str(missing))
    forget_cached()
    return missing


@pytest.mark.django_db
def test_a_prompt_before_the_model_is_ready_is_a_503_that_writes_nothing(
    api: APIClient, user: User, model_not_there: Path
) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "Hello?"}, format="json")
    assert resp.status_code == 503, resp.content
    assert int(resp["Retry-After"]) >= 1
    error = resp.json()["error"]
    assert error["code"] == "model_not_ready" and "prepare_model" in error["message"]
    assert not Message.objects.exists() and not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # /v1 reads the token on its own database threads
def test_openai_api_answers_the_same_503_in_its_own_shape(user: User, model_not_there: Path) -> None:
    token = Token.objects.create(user=user)
    resp = APIClient().post(
        "/v1/chat/completions",
        {"model": settings.ENGINE.served_model_name, "messages": [{"role": "user", "content": "Hi"}]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token.key}",
    )
    assert resp.status_code == 503, resp.content
    assert int(resp["Retry-After"]) >= 1
    assert resp.json()["error"]["code"] == "model_not_ready"
    assert not Message.objects.exists() and not Run.objects.exists()


# -- a real web process ----------------------------------------------------------------------------------


def _http(method: str, url: str, *, token: str = "", body: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request; ``(status, JSON body, headers with lower-case names)``, also for 4xx/5xx answers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, json.loads(response.read() or b"{}"), headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), {k.lower(): v for k, v in exc.headers.items()}


def _start_web(port: int, **env: str) -> subprocess.Popen[bytes]:
    LOGS.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "uvicorn", "chatproject.asgi:application", "--host", "127.0.0.1"]
    return subprocess.Popen(
        [*argv, "--port", str(port), "--timeout-graceful-shutdown", "2"],
        cwd=ROOT,
        env=child_env(LOG_LEVEL="INFO", **env),
        stdout=(LOGS / f"readiness-web-{port}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_listening(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> float:
    """Seconds until ``url`` accepts a connection (any answer), or fails the test."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        assert proc.poll() is None, "the web process exited"
        try:
            _http("GET", url)
            return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


@pytest.fixture
def chat_owner() -> Iterator[tuple[str, int]]:
    user = UserFactory.create()
    yield Token.objects.create(user=user).key, ChatFactory.create(owner=user).pk


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_web_process_posted_to_the_moment_it_listens_answers_202(chat_owner: tuple[str, int]) -> None:
    """The tokenizer is loaded at lifespan startup, before the port opens: the first prompt after a (re)start
    is accepted, not a 500 racing a background load."""
    token, chat_id = chat_owner
    for _ in range(2):  # a start, then a restart
        port = free_port()
        proc = _start_web(port)
        try:
            _wait_listening(f"http://127.0.0.1:{port}/healthz", proc)
            status, body, _ = _http(
                "POST", f"http://127.0.0.1:{port}/api/chats/{chat_id}/messages", token=token, body={"content": "Hi"}
            )
            assert status == 202, body
            Run.objects.filter(chat_id=chat_id).update(status=RunStatus.CANCELLED)  # free the chat for the next round
        finally:
            stop_process_group(proc)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_stack_started_while_the_model_is_prepared_answers_503_then_202(
    chat_owner: tuple[str, int], tmp_path: Path
) -> None:
    token, chat_id = chat_owner
    cache = tmp_path / "model-cache"
    cache.mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # The default deployment lives in this cache now (prepare_model re-points it when MODEL_CACHE_DIR changes).
    ModelDeployment.objects.filter(is_default=True).update(local_path=str(cache / "SmolLM2-135M-Instruct"))
    proc = _start_web(port, MODEL_CACHE_DIR=str(cache))
    try:
        _wait_listening(f"{base}/healthz", proc)
        status, body, _ = _http("GET", f"{base}/readyz")
        assert status == 503 and "does not exist yet" in json.dumps(body["checks"])
        url = f"{base}/api/chats/{chat_id}/messages"
        status, body, headers = _http("POST", url, token=token, body={"content": "Hi"})
        assert status == 503 and body["error"]["code"] == "model_not_ready", body
        assert int(headers["retry-after"]) >= 1
        assert not Message.objects.filter(chat_id=chat_id).exists()

        # prepare_model finishes: the folder appears (renamed into place, as prepare_default_model does).
        (cache / "SmolLM2-135M-Instruct").symlink_to(settings.ENGINE.default_model_dir)
        deadline = time.monotonic() + 60
        while _http("GET", f"{base}/readyz")[0] != 200:
            assert time.monotonic() < deadline, "the web process never picked the prepared model up"
            time.sleep(0.5)
        status, body, _ = _http("POST", url, token=token, body={"content": "Hi"})
        assert status == 202, body
    finally:
        stop_process_group(proc)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_default_deployment_in_its_own_folder_is_ready_before_the_port_opens(tmp_path: Path) -> None:
    """The default deployment's copy is another folder than the served model's (registered from a store, a new
    version): its tokenizer is loaded at startup too, so prompts sent together the moment the process listens are
    all accepted. Before, the first of them loaded it and the others were answered 503 ``model_not_ready``."""
    folder = tmp_path / "SmolLM2@store"
    folder.mkdir()
    source = Path(settings.ENGINE.model_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        if (source / name).is_file():
            (folder / name).write_bytes((source / name).read_bytes())
    ModelDeployment.objects.filter(is_default=True).update(local_path=str(folder))
    owners = [UserFactory.create() for _ in range(4)]  # a user each: no tier's concurrency limit in the way
    chats = [(Token.objects.create(user=u).key, ChatFactory.create(owner=u).pk) for u in owners]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start_web(port)
    try:
        _wait_listening(f"{base}/healthz", proc)
        with ThreadPoolExecutor(len(chats)) as pool:
            answers = list(
                pool.map(
                    lambda owner: _http(
                        "POST", f"{base}/api/chats/{owner[1]}/messages", token=owner[0], body={"content": "Hi"}
                    ),
                    chats,
                )
            )
        assert [status for status, _, _ in answers] == [202] * len(chats), [body for _, body, _ in answers]
        status, body, _ = _http("GET", f"{base}/readyz")
        assert status == 200 and body["checks"][f"tokenizer:{ModelDeployment.objects.get(is_default=True).key}"] == "ok"
    finally:
        stop_process_group(proc)
