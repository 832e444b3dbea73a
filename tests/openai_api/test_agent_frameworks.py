"""What agent frameworks send, on the live stack (simulated engine), through clients nobody here wrote: the official
``openai`` client and pydantic-ai's agent. A system message after the first turn, an assistant's message last, and
OpenAI's own parameters are served and recorded, not refused."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.conf import settings
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import Tier, User
from chats.models import Chat, MessageRole
from runs.models import PromptMode, Run, RunStatus
from tests.factories import UserFactory
from tests.live_stack import LiveStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("needs_worker")]

MODEL = settings.ENGINE.served_model_name


def key_for(user: User) -> str:
    return Token.objects.create(user=user).key


def client_for(live_stack: LiveStack, user: User) -> openai.OpenAI:
    return openai.OpenAI(base_url=live_stack.url("/v1"), api_key=key_for(user), max_retries=0, timeout=60)


def run_of(completion_id: str) -> Run:
    return Run.objects.select_related("chat", "tier", "assistant_message").get(
        pk=int(completion_id.removeprefix("chatcmpl-"))
    )


def stored(run: Run) -> list[tuple[str, str]]:
    return list(run.chat.messages.order_by("id").values_list("role", "content"))


def test_a_system_message_after_the_first_turn_is_served_and_stored_in_place(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    messages: list[Any] = [
        {"role": "user", "content": "Give me a colour."},
        {"role": "assistant", "content": "Blue, probably."},
        {"role": "system", "content": "Answer with one word."},
        {"role": "developer", "content": "No punctuation."},
        {"role": "user", "content": "Again."},
    ]
    completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    run = run_of(completion.id)
    assert run.status == RunStatus.DONE
    assert stored(run)[:5] == [(m["role"], m["content"]) for m in messages]
    assert stored(run)[5] == (MessageRole.ASSISTANT, completion.choices[0].message.content)
    assert completion.service_tier == "default"  # served on the user's own tier (OpenAI's word for it)


def test_an_assistant_message_last_is_continued_or_answered(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    prefill: list[Any] = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    continued = client.chat.completions.create(
        model=MODEL,
        messages=prefill,
        max_tokens=8,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    run = run_of(continued.id)
    assert run.prompt_mode == PromptMode.CONTINUE and run.status == RunStatus.DONE
    assert continued.choices[0].message.role == "assistant"
    # The record: the prefilled message as sent, then only the new text (what the response holds, as vLLM's).
    assert stored(run) == [
        (MessageRole.USER, prefill[0]["content"]),
        (MessageRole.ASSISTANT, prefill[1]["content"]),
        (MessageRole.ASSISTANT, continued.choices[0].message.content),
    ]
    new_turn = client.chat.completions.create(model=MODEL, messages=prefill, max_tokens=8)  # vLLM's default
    assert run_of(new_turn.id).prompt_mode == PromptMode.CHAT
    with pytest.raises(openai.BadRequestError) as both:
        client.chat.completions.create(
            model=MODEL,
            messages=prefill,
            extra_body={"continue_final_message": True, "add_generation_prompt": True},
        )
    assert "Cannot set both" in both.value.message


def test_openais_own_parameters_land_on_the_run(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("plus")
    client = client_for(live_stack, user)
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=8,
        metadata={"team": "search", "ticket": "T-1"},
        store=True,
        service_tier="flex",
        prompt_cache_key="conversation-7",
        safety_identifier="hashed-end-user",
    )
    run = run_of(completion.id)
    assert run.metadata == {"team": "search", "ticket": "T-1"} and run.store is True
    assert run.prompt_cache_key == "conversation-7" and run.end_user == "hashed-end-user"
    assert run.tier.name == "free" and completion.service_tier == "flex"  # flex: the tier below plus
    api = APIClient()
    api.force_authenticate(user)
    assert api.get(f"/api/runs/{run.pk}").json()["metadata"] == {"team": "search", "ticket": "T-1"}
    # The same key again prefers the worker that served the last run with it: the new chat starts pinned to it.
    again = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, prompt_cache_key="conversation-7"
    )
    assert run.worker and run_of(again.id).chat.last_worker == run.worker
    assert run_of(again.id).store is False  # OpenAI's default for chat completions
    above = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, service_tier="priority"
    )
    assert above.service_tier == "default"  # never above the user's own tier


def test_bad_metadata_and_too_many_messages_are_400s_that_write_nothing(live_stack: LiveStack) -> None:
    tiny = Tier.objects.create(
        name="tiny",
        priority=9,
        bucket_capacity_tokens=10_000,
        bucket_refill_per_s=10,
        max_concurrent_runs=1,
        max_output_tokens=64,
        queue_depth_limit=10,
        context_limit_tokens=2048,
        max_request_messages=3,
    )
    user = UserFactory.create(tier=tiny)
    client = client_for(live_stack, user)
    with pytest.raises(openai.BadRequestError) as metadata:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], metadata={"k": "v" * 513}
        )
    assert metadata.value.body["param"] == "metadata.k" and "512" in metadata.value.message  # type: ignore[index]
    four: list[Any] = [{"role": "user", "content": str(i)} for i in range(4)]
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(model=MODEL, messages=four)
    assert too_many.value.body["code"] == "too_many_messages"  # type: ignore[index]
    assert "at most 3" in too_many.value.message and "tiny" in too_many.value.message
    assert not Chat.objects.filter(owner=user).exists()
    assert not Run.objects.filter(user=user).exists()


def test_pydantic_ai_agent_with_a_system_prompt_mid_history_and_a_retry(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = openai.AsyncOpenAI(base_url=live_stack.url("/v1"), api_key=key_for(user), max_retries=0, timeout=60)
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, system_prompt="You are terse.", retries=2)
    tries: list[str] = []

    @agent.output_validator
    def once_more(output: str) -> str:
        tries.append(output)
        if len(tries) == 1:
            raise ModelRetry("Say it again, shorter.")
        return output

    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart(content="You are terse."), UserPromptPart(content="Hi")]),
        ModelResponse(parts=[TextPart(content="Hello.")]),
        ModelRequest(parts=[SystemPromptPart(content="From now on, answer in French.")]),
    ]
    result = agent.run_sync("Name a colour.", message_history=history)
    assert len(tries) == 2 and result.output == tries[-1]
    runs = list(Run.objects.filter(user=user).order_by("id").select_related("chat"))
    assert len(runs) == 2  # the answer, then the retry
    roles = [role for role, _ in stored(runs[-1])]
    first_answer = roles.index(MessageRole.ASSISTANT)
    assert MessageRole.SYSTEM in roles[first_answer:], roles  # a system message after the first turn, served
