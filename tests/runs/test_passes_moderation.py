"""The input moderation pass before the queue (``runs.passes``): a flagged prompt is refused with nothing queued or
charged, kept in the chat as a refused message (on ``/api``) or as the violation's record (on ``/v1``), and never in
a later prompt; a clean one records the pass on its run. The classifier is the real local one (alt-profanity-check).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.context import plan_chat_prompt
from chats.models import Chat, Message, Moderation
from moderation.models import ModerationPolicy, Violation
from moderation.selectors import forget_cached_policies
from runs.models import Run
from tests.factories import ChatFactory, UserFactory

pytestmark = pytest.mark.django_db

FLAGGED = "you are a fucking idiot and I hate you"
CLEAN = "What is the capital of France?"


@pytest.fixture(autouse=True)
def fresh_policies() -> Any:
    forget_cached_policies()
    yield
    forget_cached_policies()


def post(api: APIClient, chat: Chat, content: str) -> Any:
    return api.post(f"/api/chats/{chat.pk}/messages", {"content": content}, format="json")


def test_a_flagged_prompt_is_refused_kept_as_refused_and_nothing_is_queued(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="")

    resp = post(api, chat, FLAGGED)

    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["code"] == "content_policy_violation"
    assert "flagged by moderation" in error["message"]
    assert error["moderation"]["backend"] == "local" and error["moderation"]["categories"]
    refused = Message.objects.get(pk=error["message_id"])
    assert (refused.chat_id, refused.content, refused.moderation) == (chat.pk, FLAGGED, Moderation.REFUSED)
    assert not Run.objects.filter(chat=chat).exists()  # nothing queued, nothing reserved
    violation = Violation.objects.get(user=user)
    assert (violation.direction, violation.message_id) == ("input", refused.pk)
    listed = api.get(f"/api/chats/{chat.pk}/messages").json()
    shown = listed["results"] if isinstance(listed, dict) else listed
    assert [(m["id"], m["moderation"]) for m in shown] == [(refused.pk, "refused")]


def test_a_clean_prompt_records_the_input_pass_and_the_refused_one_stays_out_of_its_prompt(
    api: APIClient, user: User
) -> None:
    chat = ChatFactory.create(owner=user)
    assert post(api, chat, FLAGGED).status_code == 400

    resp = post(api, chat, CLEAN)

    assert resp.status_code == 202, resp.content
    run = Run.objects.select_related("user_message", "chat").get(pk=resp.json()["run"]["id"])
    (record,) = [p for p in run.passes if p["pass"] == "moderate_input"]
    assert record["decision"] == "allowed" and record["backend"] == "local" and record["ms"] >= 0
    assert resp.json()["run"]["passes"] == run.passes
    plan = plan_chat_prompt(
        chat=run.chat, user_message=run.user_message, context_limit_tokens=4096, max_tokens=run.max_tokens
    )
    rendered = str(plan.messages)
    assert CLEAN in rendered and FLAGGED not in rendered


def test_regenerating_a_refused_prompt_is_a_409(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    assert post(api, chat, FLAGGED).status_code == 400

    resp = api.post(f"/api/chats/{chat.pk}/regenerate", format="json")

    assert resp.status_code == 409, resp.content
    assert resp.json()["error"]["code"] == "prompt_refused"


def test_the_tier_can_switch_the_input_pass_off(api: APIClient, user: User) -> None:
    ModerationPolicy.objects.update_or_create(tier=user.tier, defaults={"input_enabled": False})
    forget_cached_policies()
    chat = ChatFactory.create(owner=user)

    resp = post(api, chat, FLAGGED)

    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    assert [p["pass"] for p in run.passes if p["pass"] == "moderate_input"] == []


def test_another_users_chat_is_still_a_404_for_a_flagged_prompt(api: APIClient, other_user: User) -> None:
    chat = ChatFactory.create(owner=other_user)

    resp = post(api, chat, FLAGGED)

    assert resp.status_code == 404, resp.content  # as a missing chat reads, flagged or not
    assert not Message.objects.filter(chat=chat).exists()  # nothing written into another user's chat


@pytest.mark.django_db(transaction=True)  # the async view reads the token on a connection of its own
def test_a_flagged_v1_prompt_is_an_openai_400_that_writes_only_the_violation(user: User) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {Token.objects.create(user=user).key}")
    chats_before = Chat.objects.filter(owner=user).count()

    resp = client.post(
        "/v1/chat/completions",
        {"model": settings.ENGINE.served_model_name, "messages": [{"role": "user", "content": FLAGGED}]},
        format="json",
    )

    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert (error["code"], error["type"]) == ("content_policy_violation", "invalid_request_error")
    assert Chat.objects.filter(owner=user).count() == chats_before
    violation = Violation.objects.get(user=user)
    assert violation.message_id is None and violation.direction == "input"


def test_repeated_violations_suspend_the_user_per_the_tier_policy(
    api: APIClient, django_capture_on_commit_callbacks: Any
) -> None:
    user = UserFactory.create()
    ModerationPolicy.objects.update_or_create(
        tier=user.tier, defaults={"violations_before_suspension": 2, "suspension_minutes": 10}
    )
    forget_cached_policies()
    client = APIClient()
    client.force_authenticate(user)
    chat = ChatFactory.create(owner=user)
    with django_capture_on_commit_callbacks(execute=True):  # the violations' marker is set after commit
        assert post(client, chat, FLAGGED).status_code == 400
        assert post(client, chat, FLAGGED).status_code == 400

    resp = post(client, chat, CLEAN)

    assert resp.status_code == 403, resp.content
    assert resp.json()["error"]["code"] == "moderation_suspended"
    assert not Run.objects.filter(chat=chat).exists()
