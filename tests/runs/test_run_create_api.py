"""POST /api/chats/{id}/messages: the prompt's validation, the 202 answer, the 409 for a second active run."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.conf import settings
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks, Settings
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message, MessageRole
from runs.models import Run, RunStatus
from tests.factories import ChatFactory, UserFactory

pytestmark = pytest.mark.django_db


def post_prompt(api: APIClient, chat: Chat, body: Any) -> Any:
    """Posts ``body`` as JSON; bytes are sent as they are (for JSON the test client cannot encode)."""
    url = f"/api/chats/{chat.pk}/messages"
    if isinstance(body, bytes):
        return api.post(url, body, content_type="application/json")
    return api.post(url, body, format="json")


def test_post_message_creates_user_message_and_queued_run(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="")
    resp = post_prompt(api, chat, {"content": "What is the capital of France?\nThanks"})
    assert resp.status_code == 202, resp.content
    body = resp.json()
    run = Run.objects.select_related("user_message").get(pk=body["run"]["id"])
    assert run.status == RunStatus.QUEUED
    assert run.user == user and run.chat == chat and run.tier == user.tier
    assert run.priority == user.tier.priority
    assert run.max_tokens == min(settings.CHAT_LIMITS.default_max_tokens, user.tier.max_output_tokens)
    assert run.user_message.content == "What is the capital of France?\nThanks"
    assert run.user_message.role == MessageRole.USER
    assert body["message"]["id"] == run.user_message.pk
    assert body["run"]["status"] == "queued"
    assert body["stream_url"] == f"/api/runs/{run.pk}/stream" == body["run"]["stream_url"]
    chat.refresh_from_db()
    assert chat.title == "What is the capital of France?"  # an untitled chat is named after its first prompt
    assert chat.updated_at >= run.user_message.created_at


def test_sampling_parameters_are_stored(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    cap = user.tier.max_output_tokens
    resp = post_prompt(api, chat, {"content": "hi", "max_tokens": cap, "temperature": 0, "top_p": 0.5})
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    assert (run.max_tokens, run.temperature, run.top_p) == (cap, 0.0, 0.5)


def test_stop_seed_and_response_format_are_stored_as_asked(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    resp = post_prompt(
        api,
        chat,
        {
            "content": "hi",
            "stop": ["\n\n", "END"],
            "seed": 42,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        },
    )
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    assert run.sampling == {"seed": 42, "stop": ["\n\n", "END"], "structured_outputs": {"json": schema}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"stop": [""]}, "stop"),
        ({"stop": ["a"] * 17}, "stop"),
        ({"stop": "END"}, "stop"),
        ({"seed": "1"}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
            "response_format",
        ),
        ({"ignore_eos": True}, "ignore_eos"),
    ],
)
def test_bad_sampling_is_a_400_naming_the_field_and_writes_nothing(
    api: APIClient, user: User, body: dict[str, Any], field: str
) -> None:
    chat = ChatFactory.create(owner=user)
    resp = post_prompt(api, chat, {"content": "hi", **body})
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"], resp.json()
    assert not Run.objects.filter(chat=chat).exists() and not Message.objects.filter(chat=chat).exists()


def test_the_run_is_handed_on_only_after_commit(
    api: APIClient, user: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    chat = ChatFactory.create(owner=user)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert post_prompt(api, chat, {"content": "hi"}).status_code == 202
    assert len(callbacks) == 1


def _assert_nothing_written(chat: Chat, *, title: str) -> None:
    before = chat.updated_at
    chat.refresh_from_db()
    assert not Message.objects.filter(chat=chat).exists()
    assert not Run.objects.filter(chat=chat).exists()
    assert chat.title == title
    assert chat.updated_at == before


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "content: This field is required"),
        ({"content": ""}, "content: This field may not be blank"),
        ({"content": "   \n\t "}, "content: must not be empty or only whitespace"),
        ({"content": 123}, "content: must be a string"),
        ({"content": ["a", "b"]}, "content: must be a string"),
        ({"content": {"text": "hi"}}, "content: must be a string"),
        ({"content": True}, "content: must be a string"),
        ({"content": None}, "content: This field may not be null"),
        (b'{"content": "\\ud800"}', "content: contains a lone surrogate (\\ud800) at position 0"),
        (b'{"content": "ok \\udfff"}', "content: contains a lone surrogate (\\udfff) at position 3"),
        ({"content": "hi", "ignore_eos": True}, "ignore_eos: is not a field of this request"),
        ({"content": "hi", "stop": "\n"}, "stop: Expected a list"),
        ({"content": "hi", "temperature": -0.1}, "temperature: Ensure this value is greater than or equal to 0"),
        ({"content": "hi", "temperature": 2.5}, "temperature: Ensure this value is less than or equal to 2"),
        ({"content": "hi", "temperature": "0.5"}, "temperature: must be a number"),
        ({"content": "hi", "temperature": True}, "temperature: must be a number"),
        ({"content": "hi", "top_p": 0}, "top_p: Ensure this value is greater than or equal to 0.01"),
        ({"content": "hi", "top_p": 1.5}, "top_p: Ensure this value is less than or equal to 1"),
        ({"content": "hi", "max_tokens": 0}, "max_tokens: Ensure this value is greater than or equal to 1"),
        ({"content": "hi", "max_tokens": 1.5}, "max_tokens: must be an integer"),
        ({"content": "hi", "max_tokens": "10"}, "max_tokens: must be an integer"),
        ({"content": "hi", "max_tokens": 10**30}, "max_tokens must be at most"),
    ],
)
def test_invalid_prompt_is_400_and_writes_nothing(
    api: APIClient, user: User, body: dict[str, Any] | bytes, fragment: str
) -> None:
    chat = ChatFactory.create(owner=user, title="")
    resp = post_prompt(api, chat, body)
    assert resp.status_code == 400, resp.content
    assert fragment in resp.json()["error"]["message"]
    _assert_nothing_written(chat, title="")


@pytest.mark.parametrize(("tier", "cap"), [("free", 512), ("pro", 2048)])
def test_max_tokens_above_the_tier_cap_is_400(tier: str, cap: int) -> None:
    user = UserFactory.with_tier(tier)
    assert user.tier.max_output_tokens == cap
    api = APIClient()
    api.force_authenticate(user)
    chat = ChatFactory.create(owner=user, title="t")

    resp = post_prompt(api, chat, {"content": "hi", "max_tokens": cap + 1})

    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "max_tokens_too_large"
    assert f"at most {cap}" in error["message"] and tier in error["message"]
    _assert_nothing_written(chat, title="t")
    assert post_prompt(api, chat, {"content": "hi", "max_tokens": 256}).status_code == 202


def test_content_length_limit_is_configurable(api: APIClient, user: User, settings: Settings) -> None:
    settings.CHAT_LIMITS = dataclasses.replace(settings.CHAT_LIMITS, max_content_chars=10)
    chat = ChatFactory.create(owner=user, title="")

    resp = post_prompt(api, chat, {"content": "x" * 11})

    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "content: is 11 characters long; the limit is 10."
    assert resp.json()["error"]["fields"] == {"content": ["is 11 characters long; the limit is 10."]}
    _assert_nothing_written(chat, title="")
    assert post_prompt(api, chat, {"content": "x" * 10}).status_code == 202


def test_default_content_limit_applies(api: APIClient, user: User) -> None:
    limit = settings.CHAT_LIMITS.max_content_chars
    chat = ChatFactory.create(owner=user, title="")
    assert post_prompt(api, chat, {"content": "y" * (limit + 1)}).status_code == 400
    _assert_nothing_written(chat, title="")


def test_second_prompt_while_run_active_is_409(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    first = post_prompt(api, chat, {"content": "one"})
    assert first.status_code == 202
    chat.refresh_from_db()
    activity = chat.updated_at

    resp = post_prompt(api, chat, {"content": "two"})

    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "run_in_progress"
    assert "in progress" in resp.json()["error"]["message"]
    assert list(Message.objects.filter(chat=chat).values_list("content", flat=True)) == ["one"]
    assert Run.objects.filter(chat=chat).count() == 1
    chat.refresh_from_db()
    assert chat.updated_at == activity


@pytest.mark.parametrize("status", [RunStatus.STREAMING, RunStatus.CANCELLING])
def test_409_for_every_unfinished_status(api: APIClient, user: User, status: RunStatus) -> None:
    chat = ChatFactory.create(owner=user)
    run_id = post_prompt(api, chat, {"content": "one"}).json()["run"]["id"]
    Run.objects.filter(pk=run_id).update(status=status)
    assert post_prompt(api, chat, {"content": "two"}).status_code == 409


@pytest.mark.parametrize("status", [RunStatus.DONE, RunStatus.CANCELLED, RunStatus.FAILED])
def test_a_finished_run_allows_the_next_prompt(api: APIClient, user: User, status: RunStatus) -> None:
    chat = ChatFactory.create(owner=user)
    run_id = post_prompt(api, chat, {"content": "one"}).json()["run"]["id"]
    Run.objects.filter(pk=run_id).update(status=status)
    assert post_prompt(api, chat, {"content": "two"}).status_code == 202
    assert Run.objects.filter(chat=chat).count() == 2


def test_after_cancelling_a_queued_run_the_chat_accepts_a_prompt(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    run_id = post_prompt(api, chat, {"content": "one"}).json()["run"]["id"]
    assert api.post(f"/api/runs/{run_id}/cancel").json()["status"] == "cancelled"
    assert post_prompt(api, chat, {"content": "two"}).status_code == 202


def test_active_runs_in_other_chats_do_not_conflict(api: APIClient, user: User) -> None:
    first, second = ChatFactory.create(owner=user), ChatFactory.create(owner=user)
    assert post_prompt(api, first, {"content": "a"}).status_code == 202
    assert post_prompt(api, second, {"content": "b"}).status_code == 202
