"""Regenerate and continue: a new run of the chat's last prompt; the replaced answer stays as an earlier version,
out of the message list and of every later prompt."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Message
from generation.result import EngineFinishReason
from inference_workers.prompting import build_prompt_messages, build_run_prompt
from runs.models import Run, RunStatus
from tests.chat_turns import finish_run, turn
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db


def _messages(api: APIClient, chat_id: int) -> list[dict[str, object]]:
    results: list[dict[str, object]] = api.get(f"/api/chats/{chat_id}/messages").json()["results"]
    return results[::-1]  # oldest first


def test_regenerate_makes_a_version_and_only_the_current_one_is_in_later_prompts(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Name a colour.", "Blue.")

    resp = api.post(f"/api/chats/{chat.pk}/regenerate")
    assert resp.status_code == 201, resp.content
    run = resp.json()
    assert run["status"] == "queued" and run["revision"] == "regenerate" and run["stream_url"]
    first_answer = Message.objects.get(content="Blue.")
    assert run["replaces"] == first_answer.pk
    assert Run.objects.get(pk=run["id"]).user_message.content == "Name a colour."
    # Until the new answer is stored, the old one is still the current one.
    assert [m["content"] for m in _messages(api, chat.pk)] == ["Name a colour.", "Blue."]
    assert api.post(f"/api/chats/{chat.pk}/regenerate").status_code == 409  # one run in flight

    finish_run(run["id"], "Green.")
    shown = _messages(api, chat.pk)
    assert [m["content"] for m in shown] == ["Name a colour.", "Green."]
    versions = shown[1]["versions"]
    assert isinstance(versions, list) and [v["content"] for v in versions] == ["Blue."]
    assert versions[0]["message"] == first_answer.pk and versions[0]["revision"] == ""
    assert shown[1]["run"] == run["id"]

    nxt = turn(api, chat.pk, "And another?", "Red.")
    messages = build_prompt_messages(run=Run.objects.get(pk=nxt["run"]["id"]))
    contents = [m["content"] for m in messages]
    assert "Green." in contents and "Blue." not in contents


def test_continue_goes_on_from_a_cut_answer(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Count to ten.", "One, two, three,", EngineFinishReason.LENGTH)

    resp = api.post(f"/api/chats/{chat.pk}/continue")
    assert resp.status_code == 201, resp.content
    run = Run.objects.select_related("replaces").get(pk=resp.json()["id"])
    assert run.revision == "continue"
    prompt = build_run_prompt(run=run)
    assert prompt.endswith("One, two, three,")  # the answer so far opens the assistant's turn
    assert prompt.count("One, two, three,") == 1  # and is not also in the history

    finish_run(run.pk, " four, five.", tokens=4)
    shown = _messages(api, chat.pk)
    assert [m["content"] for m in shown] == ["Count to ten.", "One, two, three, four, five."]
    assert [v["content"] for v in shown[1]["versions"]] == ["One, two, three,"]  # type: ignore[index]
    assert Message.objects.get(pk=shown[1]["id"]).token_count == 5 + 4


@pytest.mark.parametrize("finish", [EngineFinishReason.STOP])
def test_continue_refuses_a_finished_answer(api: APIClient, user: User, finish: EngineFinishReason) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Hi", "Hello.", finish)
    resp = api.post(f"/api/chats/{chat.pk}/continue")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "not_continuable"
    assert Run.objects.filter(chat=chat).count() == 1


def test_a_cancelled_answer_can_be_continued(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Tell a story.", "Once upon", EngineFinishReason.ABORT)
    assert Run.objects.get(chat=chat).status == RunStatus.CANCELLED
    assert api.post(f"/api/chats/{chat.pk}/continue").status_code == 201


def test_an_empty_chat_has_nothing_to_regenerate(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    for action in ("regenerate", "continue"):
        resp = api.post(f"/api/chats/{chat.pk}/{action}")
        assert resp.status_code == 409 and resp.json()["error"]["code"] == "nothing_to_revise"


def test_another_users_chat_is_404(api: APIClient, other_api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    turn(api, chat.pk, "Hi", "Hello", EngineFinishReason.LENGTH)
    for action in ("regenerate", "continue"):
        assert other_api.post(f"/api/chats/{chat.pk}/{action}").status_code == 404
        assert other_api.post(f"/api/chats/99999999/{action}").status_code == 404
    assert Run.objects.filter(chat=chat).count() == 1
