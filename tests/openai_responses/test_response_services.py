"""``/v1/responses`` writes with OpenAI's parameters as chat completions give them meaning: ``service_tier`` onto
the user's tiers (never above), ``prompt_cache_key`` into chat affinity, and the tier's cap on the messages one
call writes, counting the conversation a ``previous_response_id`` copies (no server: the service itself)."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Tier, User
from chats.models import Chat, Message
from deployments.selection import Served, resolve_model
from openai_api.errors import OpenAIRequestError
from openai_api.responses.formats import response_object
from openai_api.responses.models import ResponseRecord
from openai_api.responses.requests import PreviousOutput, parse_response_create
from openai_api.responses.services import response_create
from tests.factories import RunFactory, UserFactory

pytestmark = pytest.mark.django_db


def create(user: User, previous: ResponseRecord | None = None, **fields: Any) -> ResponseRecord:
    body = {"model": "SmolLM2-135M-Instruct", "input": "Name a colour.", **fields}
    output = PreviousOutput(text="Blue.") if previous is not None else None
    deployment: Served = resolve_model(None)
    return response_create(
        user=user, request=parse_response_create(body, previous=output), deployment=deployment, previous=previous
    )


def test_flex_serves_below_the_users_tier_and_says_so() -> None:
    user = UserFactory.with_tier("plus")
    record = create(user, service_tier="flex")
    assert record.run.tier.name == "free"
    assert response_object(record, record.run)["service_tier"] == "flex"
    own = create(user, service_tier="priority")  # never above the user's own
    assert own.run.tier.name == "plus"
    assert response_object(own, own.run)["service_tier"] == "default"


def test_an_unknown_service_tier_is_a_400_that_writes_nothing() -> None:
    user = UserFactory.create()
    with pytest.raises(OpenAIRequestError) as caught:
        create(user, service_tier="gold")
    assert caught.value.param == "service_tier"
    assert not Chat.objects.filter(owner=user).exists()


def test_a_prompt_cache_key_prefers_the_worker_of_the_users_latest_run_with_it() -> None:
    user = UserFactory.create()
    RunFactory.create(user=user, prompt_cache_key="conv-1", worker="gpu-b@host")
    RunFactory.create(user=UserFactory.create(), prompt_cache_key="conv-1", worker="gpu-x@host")  # another user's
    record = create(user, prompt_cache_key="conv-1")
    assert record.run.prompt_cache_key == "conv-1"
    assert record.run.chat.last_worker == "gpu-b@host"
    assert create(user, prompt_cache_key="conv-2").run.chat.last_worker == ""


def test_the_tiers_message_cap_counts_the_continued_conversation() -> None:
    Tier.objects.filter(name="free").update(max_request_messages=4)
    user = UserFactory.with_tier("free")
    first = create(user)  # 1 row: the question
    second = create(user, previous=first, input="And another?")  # 3: the copy, the answer, the question
    assert Message.objects.filter(chat=second.run.chat).count() == 3
    written = Message.objects.count()
    with pytest.raises(OpenAIRequestError) as caught:
        create(user, previous=second, input="And a third?")  # 5 > 4
    assert (caught.value.param, caught.value.code, caught.value.status) == ("input", "too_many_messages", 400)
    assert "5 messages" in caught.value.message and "at most 4" in caught.value.message
    many = [{"role": "user", "content": f"q{i}"} for i in range(5)]
    with pytest.raises(OpenAIRequestError):
        create(user, input=many)
    assert Message.objects.count() == written  # nothing written by either refusal


def test_a_continuation_keeps_the_inputs_system_messages_but_not_the_instructions() -> None:
    user = UserFactory.with_tier("pro")  # four runs at once
    opening = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Name a colour."}]
    plain = create(user, previous=create(user, input=opening), input="Another?")
    assert list(Message.objects.filter(chat=plain.run.chat).values_list("role", "content"))[:1] == [
        ("system", "Answer in French.")
    ]
    first = create(user, instructions="Be terse.", input=[*opening, {"role": "developer", "content": "No lists."}])
    chained = create(user, previous=first, input="Another?")
    kept = list(Message.objects.filter(chat=chained.run.chat).values_list("role", "content"))
    assert ("system", "Be terse.") not in kept
    assert kept[:3] == [("system", "Answer in French."), ("user", "Name a colour."), ("developer", "No lists.")]
