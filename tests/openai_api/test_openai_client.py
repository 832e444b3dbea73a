"""The official OpenAI Python client against ``/v1`` on the live stack (uvicorn, Celery worker, dispatcher).

Each call is a run like a prompt from the chat UI: the answer the client gets is the assistant message
stored in Postgres, admission refusals are ``RateLimitError`` with ``Retry-After``, and a client that goes
away cancels its run.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User, UserLimitOverride
from chats.models import Chat, ChatOrigin, MessageRole
from runs.models import Run, RunStatus
from tests.factories import UserFactory
from tests.live_stack import SIMULATED_ENGINE_ENV, LiveStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("needs_worker")]

MODEL = settings.ENGINE.served_model_name


def client_for(live_stack: LiveStack, user: User | None, **kwargs: Any) -> openai.OpenAI:
    key = Token.objects.create(user=user).key if user is not None else "not-a-token"
    return openai.OpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=60, **kwargs)


def run_of(completion_id: str) -> Run:
    assert completion_id.startswith("chatcmpl-")
    return Run.objects.select_related("assistant_message", "chat").get(pk=int(completion_id.removeprefix("chatcmpl-")))


def test_models_lists_the_served_model(live_stack: LiveStack) -> None:
    models = client_for(live_stack, UserFactory.create()).models.list()
    assert [m.id for m in models.data] == [MODEL, f"{MODEL}@v1", "auto"]  # the name, each version, the router


def test_model_auto_answers_and_names_the_deployment_that_served(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.create())

    completion = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0
    )
    streamed = list(
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0, stream=True
        )
    )

    run = run_of(completion.id)
    assert completion.model == f"{MODEL}@v1" == f"{run.model}@{run.deployment.version}"  # type: ignore[union-attr]
    assert {chunk.model for chunk in streamed} == {f"{MODEL}@v1"}
    assert completion.choices[0].message.content == run.assistant_message.content  # type: ignore[union-attr]
    (route,) = [p for p in run.passes if p["pass"] == "route"]
    assert route["policy"] == "single" and route["model"] == f"{MODEL}@v1"


def test_completion_is_the_stored_answer_and_keeps_the_conversation(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = client_for(live_stack, user)
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a colour."},
        ],
        max_tokens=20,
        temperature=0,
    )
    run = run_of(completion.id)
    choice = completion.choices[0]
    assert run.status == RunStatus.DONE and run.assistant_message is not None
    assert choice.message.role == "assistant"
    assert choice.message.content == run.assistant_message.content != ""
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == run.output_tokens
    assert completion.usage.prompt_tokens == run.input_tokens > 0
    assert (run.max_tokens, run.temperature) == (20, 0.0)
    # The call is recorded as an API chat: its messages in order, and kept out of the sidebar.
    assert run.chat.origin == ChatOrigin.API and run.chat.owner == user
    roles = list(run.chat.messages.order_by("id").values_list("role", "content"))
    assert roles[:4] == [
        (MessageRole.SYSTEM, "You are terse."),
        (MessageRole.USER, "Hi"),
        (MessageRole.ASSISTANT, "Hello."),
        (MessageRole.USER, "Name a colour."),
    ]
    assert roles[4] == (MessageRole.ASSISTANT, choice.message.content)
    api = APIClient()
    api.force_authenticate(user)
    assert api.get("/api/chats").json()["results"] == []


def test_streamed_chunks_reassemble_the_stored_answer(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a story."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    ids = {c.id for c in chunks}
    assert len(ids) == 1
    run = run_of(ids.pop())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1, "the answer should arrive in several pieces"
    assert run.assistant_message is not None and text == run.assistant_message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length" if run.finish_reason == "length" else "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == run.output_tokens


def test_tools_with_the_default_auto_choice_are_served_and_reach_the_prompt(live_stack: LiveStack) -> None:
    """No ``tool_choice``: "auto". The simulated engine writes words (it honours no grammar), so the answer is the
    text branch: an ordinary message. The tools reach the model in a system message of their own first (the
    call sent none, and ``/v1`` adds no default), since the default model's template renders none."""
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    tool: Any = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city."}}
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[tool], max_tokens=12
    )
    choice = completion.choices[0]
    run = run_of(completion.id)
    assert run.assistant_message is not None
    assert (choice.message.content, choice.message.tool_calls) == (run.assistant_message.content, None)
    assert choice.finish_reason in ("stop", "length")
    # The call sent no system message and /v1 adds no default of ours: one system message holds the tools alone.
    system = run.chat.messages.get(role=MessageRole.SYSTEM).content
    assert system.startswith("You can call these functions") and '"name": "get_weather"' in system
    assert settings.CONTEXT.system_prompt not in system
    assert run.tools == [tool]


def test_bad_requests_are_openai_errors_and_write_nothing(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = client_for(live_stack, user)
    with pytest.raises(openai.AuthenticationError):
        client_for(live_stack, None).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert MODEL in str(missing.value)
    with pytest.raises(openai.BadRequestError) as spaced:  # a name is matched exactly, as vLLM and OpenAI match it
        client.chat.completions.create(model=f" {MODEL} ", messages=[{"role": "user", "content": "x"}])
    assert spaced.value.body["code"] == "invalid_model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as reasoning:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], reasoning_effort="low")
    assert reasoning.value.body["code"] == "unsupported_parameter"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as auto_regex:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            extra_body={"structured_outputs": {"regex": "a+"}},
        )
    assert auto_regex.value.body["param"] == "structured_outputs"  # type: ignore[index]  # "auto": text or a call
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body={"frob": 1})
    assert unknown.value.body["param"] == "frob"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as choices:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], n=2, max_tokens=10**6)
    assert "max_tokens" in str(choices.value)
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=10**6)
    assert "max_tokens" in str(too_many.value)
    assert not Chat.objects.filter(owner=user).exists()
    assert not Run.objects.filter(user=user).exists()


def test_a_refused_call_is_a_rate_limit_error_with_retry_after(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("free")
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=1)
    client = client_for(live_stack, user)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a"}], stream=True)
    first = next(iter(stream))  # its run is admitted and holds the user's only slot
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "b"}])
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert "Too many runs at once" in str(refused.value)
    assert Run.objects.filter(user=user).count() == 1
    stream.close()
    assert run_of(first.id).pk == Run.objects.get(user=user).pk


def test_a_client_that_goes_away_cancels_its_run(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a long story."}], stream=True
    )
    received = []
    for chunk in stream:
        received.append(chunk)
        if sum(bool(c.choices and c.choices[0].delta.content) for c in received) >= 2:
            break
    stream.close()
    run = run_of(received[0].id)
    deadline = time.monotonic() + 20
    while not Run.objects.get(pk=run.pk).is_terminal and time.monotonic() < deadline:
        time.sleep(0.2)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.output_tokens < int(SIMULATED_ENGINE_ENV["SIM_OUTPUT_TOKENS"])  # cut short


def test_the_first_chunk_carries_the_first_token(live_stack: LiveStack) -> None:
    """As vLLM and OpenAI send it: a client's time to first token is the time to the first chunk."""
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello"}], stream=True, max_tokens=8
    )
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content
    rest = list(stream)
    # The worker writes the token to the stream before it stamps first_token_at: read it once the answer is done.
    assert run_of(first.id).first_token_at is not None
    assert [c.choices[0].delta.role for c in rest if c.choices] == [None] * len([c for c in rest if c.choices])


def test_n_choices_stream_side_by_side_and_the_usage_adds_up(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = client_for(live_stack, user)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a story."}],
        n=3,
        seed=11,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        user="customer-42",
    )
    chunks = list(stream)
    texts = {
        i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in range(3)
    }
    runs = list(Run.objects.filter(user=user).select_related("assistant_message").order_by("pk"))
    assert len(runs) == 3
    assert [texts[i] for i in range(3)] == [r.assistant_message.content for r in runs if r.assistant_message]
    assert [r.sampling.get("seed") for r in runs] == [11, 12, 13]  # choice i samples with seed + i
    assert {r.end_user for r in runs} == {"customer-42"}
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == sum(r.output_tokens for r in runs)
    assert chunks[-1].usage.prompt_tokens == runs[0].input_tokens
    finishes = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(finishes) == [0, 1, 2]


def test_n_choices_count_against_the_concurrency_cap_and_a_refusal_writes_nothing(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("free")
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=2)
    client = client_for(live_stack, user)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a"}], n=3)
    assert not Run.objects.filter(user=user).exists() and not Chat.objects.filter(owner=user).exists()


def test_continuous_usage_counts_up_to_the_final_usage(live_stack: LiveStack) -> None:
    client = client_for(live_stack, UserFactory.with_tier("pro"))
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    counts = [c.usage.completion_tokens for c in chunks if c.usage is not None]
    assert len(counts) == len(chunks)
    assert counts == sorted(counts) and counts[-1] == run_of(chunks[0].id).output_tokens


def test_text_completions_use_the_prompt_as_given(live_stack: LiveStack) -> None:
    user = UserFactory.with_tier("pro")
    client = client_for(live_stack, user)
    completion = client.completions.create(model=MODEL, prompt=["Once upon", "a time"], max_tokens=6)
    assert completion.object == "text_completion" and [c.index for c in completion.choices] == [0, 1]
    runs = list(Run.objects.filter(user=user).select_related("assistant_message", "user_message").order_by("pk"))
    assert [r.user_message.content for r in runs] == ["Once upon", "a time"]
    assert {r.prompt_mode for r in runs} == {"raw"}
    assert [c.text for c in completion.choices] == [r.assistant_message.content for r in runs if r.assistant_message]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == sum(r.input_tokens for r in runs)
    streamed = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=6, stream=True, logprobs=2)
    pieces = list(streamed)
    text = "".join(c.choices[0].text for c in pieces if c.choices)
    last = Run.objects.filter(user=user).select_related("assistant_message").latest("pk")
    assert last.assistant_message is not None and text == last.assistant_message.content
    tokens = [t for c in pieces if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens or []]
    assert "".join(tokens) == text
