"""The official ``openai`` client's ``client.responses`` against ``/v1/responses`` on the live stack (uvicorn, a
Celery worker with the simulated engine, the dispatcher): each response is a run like any prompt, its answer the
message stored in Postgres."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from accounts.models import User
from chats.models import Chat, MessageRole
from openai_api.responses.models import ResponseRecord
from runs.models import Run, RunStatus
from tests.factories import UserFactory
from tests.live_stack import LiveStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("needs_worker")]

MODEL = settings.ENGINE.served_model_name


def client_for(live_stack: LiveStack, user: User) -> openai.OpenAI:
    key = Token.objects.create(user=user).key
    return openai.OpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=60)


def run_of(response_id: str) -> Run:
    return ResponseRecord.objects.select_related("run__assistant_message", "run__chat").get(public_id=response_id).run


def conversation(run: Run) -> list[tuple[str, str]]:
    return list(run.chat.messages.order_by("id").values_list("role", "content"))


def test_a_response_is_the_stored_answer_with_openai_fields(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    response = client_for(live_stack, user).responses.create(
        model=MODEL,
        input="Name a colour.",
        instructions="You are terse.",
        max_output_tokens=200,
        temperature=0,
        metadata={"ticket": "T-1"},
        safety_identifier="end-user-7",
    )
    run = run_of(response.id)
    assert response.id.startswith("resp_") and response.object == "response"
    assert run.status == RunStatus.DONE and run.assistant_message is not None
    assert response.status == "completed" and response.error is None
    assert response.output_text == run.assistant_message.content != ""
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (run.input_tokens, run.output_tokens)
    assert response.usage.total_tokens == run.input_tokens + run.output_tokens
    assert response.metadata == {"ticket": "T-1"} == run.metadata and run.store is True
    assert response.instructions == "You are terse." and response.model == MODEL
    assert (run.max_tokens, run.temperature, run.end_user) == (200, 0.0, "end-user-7")
    # The instructions are the chat's system message, and nothing else is added.
    assert conversation(run) == [
        (MessageRole.SYSTEM, "You are terse."),
        (MessageRole.USER, "Name a colour."),
        (MessageRole.ASSISTANT, response.output_text),
    ]


def test_without_instructions_no_system_prompt_is_added(live_stack: LiveStack) -> None:
    response = client_for(live_stack, UserFactory.with_tier("pro")).responses.create(model=MODEL, input="Hi")
    run = run_of(response.id)
    # No system message at all: the server's default prompt is not used (the template's own applies, as on vLLM).
    assert all(role != MessageRole.SYSTEM for role, _ in conversation(run))
    assert response.instructions is None


def test_max_output_tokens_cut_is_incomplete(live_stack: LiveStack) -> None:
    response = client_for(live_stack, UserFactory.with_tier("pro")).responses.create(
        model=MODEL, input="Tell me a story.", max_output_tokens=5
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 5
    assert response.output[0].status == "incomplete"  # type: ignore[union-attr]


def test_the_stream_is_the_responses_event_sequence(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    events = list(client.responses.create(model=MODEL, input="Tell me a story.", stream=True))
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1, "the answer should arrive in several pieces"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    run = run_of(final.id)
    assert run.assistant_message is not None
    assert "".join(d.delta for d in deltas) == final.output_text == run.assistant_message.content
    assert final.usage is not None and final.usage.output_tokens == run.output_tokens


def test_the_stream_helper_gives_the_final_response(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    with client.responses.stream(model=MODEL, input="Say hello.") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text != ""
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_previous_response_id_continues_the_conversation(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = client_for(live_stack, user)
    first = client.responses.create(model=MODEL, input="My name is Ada.", instructions="Be brief.")
    second = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.status == "completed"
    run = run_of(second.id)
    # The earlier turn and its answer are the history; its instructions are not carried over (as in OpenAI).
    assert conversation(run) == [
        (MessageRole.USER, "My name is Ada."),
        (MessageRole.ASSISTANT, first.output_text),
        (MessageRole.USER, "What is my name?"),
        (MessageRole.ASSISTANT, second.output_text),
    ]
    # Two responses may continue the same one: each is a conversation of its own.
    branch = client.responses.create(model=MODEL, input="Spell it.", previous_response_id=first.id)
    assert [c for r, c in conversation(run_of(branch.id)) if r == MessageRole.USER] == ["My name is Ada.", "Spell it."]
    items = client.responses.input_items.list(second.id)
    assert [item.model_dump()["content"][0]["text"] for item in items.data] == ["What is my name?"]


def test_retrieve_and_delete_are_the_owners_only(live_stack: LiveStack) -> None:
    owner = UserFactory.with_tier("pro")
    client = client_for(live_stack, owner)
    stored = client.responses.create(model=MODEL, input="Hi")
    again = client.responses.retrieve(stored.id)
    assert again.model_dump() == stored.model_dump()
    other = client_for(live_stack, UserFactory.with_tier("pro"))
    for call in (
        lambda: other.responses.retrieve(stored.id),
        lambda: other.responses.delete(stored.id),
        lambda: other.responses.create(model=MODEL, input="x", previous_response_id=stored.id),
        lambda: client.responses.retrieve("resp_" + "0" * 48),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.body["code"] in ("response_not_found", "previous_response_not_found")  # type: ignore[index]
    assert Run.objects.filter(user__in=[owner]).count() == 1
    client.responses.delete(stored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(stored.id)
    assert not Run.objects.filter(user=owner).exists()


def test_an_unstored_response_cannot_be_read_or_continued(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    unstored = client.responses.create(model=MODEL, input="Hi", store=False)
    assert (unstored.model_extra or {})["store"] is False and unstored.output_text != ""
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=MODEL, input="Again", previous_response_id=unstored.id)
    assert missing.value.body["param"] == "previous_response_id"  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
        ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]}]}, None),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"max_output_tokens": 10**6}, None),
    ],
)
def test_refusals_are_openai_errors_and_write_nothing(
    live_stack: LiveStack, kwargs: dict[str, Any], param: str | None
) -> None:
    user = UserFactory.with_tier("pro")
    kwargs = {"input": "Hi", **kwargs}
    with pytest.raises(openai.BadRequestError) as refused:
        client_for(live_stack, user).responses.create(model=MODEL, **kwargs)
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error" and body["message"]
    if param is not None:
        assert body["param"] == param, body
    assert not Chat.objects.filter(owner=user).exists()
    assert not Run.objects.filter(user=user).exists()


def test_a_conversation_too_long_for_the_window_is_refused_unless_truncation_is_auto(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("free")
    client = client_for(live_stack, user)
    budget = user.tier.context_limit_tokens
    turns: list[Any] = []
    for index in range(budget // 200 + 2):
        turns.append({"role": "user", "content": f"Turn {index}: " + "word " * 200})
        turns.append({"role": "assistant", "content": "ok"})
    turns.append({"role": "user", "content": "Sum it up."})
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=turns, max_output_tokens=16)
    assert refused.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert not Run.objects.filter(user=user).exists()
    cut = client.responses.create(model=MODEL, input=turns, max_output_tokens=16, truncation="auto")
    assert cut.status in ("completed", "incomplete") and cut.truncation == "auto"
