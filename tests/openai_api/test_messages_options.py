"""What agent frameworks send to ``/v1/chat/completions``: system and developer messages anywhere, an assistant's
message last (prefill), OpenAI's own non-sampling parameters; parsed, mapped onto tiers and stored (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Tier
from chats.context import plan_chat_prompt
from chats.models import ChatOrigin, MessageRole
from openai_api.errors import OpenAIRequestError
from openai_api.options import MAX_METADATA_PAIRS
from openai_api.requests import parse_chat_completion
from openai_api.service_tier import service_tier_for
from runs.selectors import prompt_cache_key_worker
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory


def body(**overrides: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **overrides}


def refused(**overrides: Any) -> OpenAIRequestError:
    with pytest.raises(OpenAIRequestError) as caught:
        parse_chat_completion(body(**overrides))
    assert caught.value.status == 400
    return caught.value


def test_system_and_developer_messages_are_kept_anywhere_in_order() -> None:
    parsed = parse_chat_completion(
        body(
            messages=[
                {"role": "user", "content": "Give me JSON."},
                {"role": "assistant", "content": "not json"},
                {"role": "system", "content": "Validation failed: answer in JSON."},
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Again."},
            ]
        )
    )
    assert parsed.history == [
        ("user", "Give me JSON."),
        ("assistant", "not json"),
        ("system", "Validation failed: answer in JSON."),
        ("developer", "Be brief."),
    ]
    assert (parsed.last_role, parsed.prompt) == ("user", "Again.")
    # A system message may even be the last one (vLLM renders it and generates after it).
    last = parse_chat_completion(body(messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]))
    assert (last.last_role, last.prompt, last.history) == ("system", "s", [("user", "a")])


def test_an_assistant_message_last_is_a_new_turn_or_continued() -> None:
    prefill = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "The capital is"}]
    new_turn = parse_chat_completion(body(messages=prefill))
    assert (new_turn.last_role, new_turn.prompt, new_turn.continue_final) == ("assistant", "The capital is", False)
    continued = parse_chat_completion(body(messages=prefill, continue_final_message=True, add_generation_prompt=False))
    assert continued.continue_final is True
    # continue_final_message alone is enough here (vLLM needs add_generation_prompt: false sent with it).
    assert parse_chat_completion(body(messages=prefill, continue_final_message=True)).continue_final is True


@pytest.mark.parametrize(
    ("overrides", "param", "code"),
    [
        ({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message", None),
        ({"add_generation_prompt": False}, "add_generation_prompt", "unsupported_parameter"),
        ({"continue_final_message": "yes"}, "continue_final_message", None),
        ({"reasoning_effort": "low"}, "reasoning_effort", "unsupported_parameter"),
        ({"verbosity": "low"}, "verbosity", "unsupported_parameter"),
        ({"store": "yes"}, "store", None),
        ({"metadata": ["a"]}, "metadata", "invalid_type"),
        ({"metadata": {f"k{i}": "v" for i in range(MAX_METADATA_PAIRS + 1)}}, "metadata", "invalid_metadata"),
        ({"metadata": {"k" * 65: "v"}}, "metadata", "invalid_metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k", "invalid_metadata"),
        ({"metadata": {"k": 1}}, "metadata.k", "invalid_metadata"),
        ({"metadata": {"k": "a\x00"}}, "metadata.k", "invalid_text"),  # jsonb holds no NUL: was a 500
        ({"metadata": {"\ud800": "v"}}, "metadata", "invalid_text"),
        ({"service_tier": 3}, "service_tier", None),
        ({"prompt_cache_key": "k" * 257}, "prompt_cache_key", None),
        ({"safety_identifier": 7}, "safety_identifier", None),
        ({"model": " m "}, "model", "invalid_model"),
    ],
)
def test_bad_values_name_their_parameter(overrides: dict[str, Any], param: str, code: str | None) -> None:
    error = refused(**overrides)
    assert (error.param, error.code) == (param, code)


def test_openai_wording_for_what_this_model_lacks() -> None:
    assert refused(reasoning_effort="high").message == (
        "Unsupported parameter: 'reasoning_effort' is not supported with this model."
    )
    assert "remove the surrounding whitespace" in refused(model=" m").message
    # null is the default, and asks for nothing
    assert parse_chat_completion(body(reasoning_effort=None, verbosity=None)).options.metadata == {}


def test_options_are_read_and_safety_identifier_is_the_end_user() -> None:
    parsed = parse_chat_completion(
        body(
            metadata={"team": "search", "k" * 64: "v" * 512},
            store=True,
            service_tier="flex",
            prompt_cache_key="conv-1",
            safety_identifier="hashed-user",
            user="old-style",
        )
    )
    options = parsed.options
    assert options.metadata == {"team": "search", "k" * 64: "v" * 512}
    assert (options.store, options.service_tier, options.prompt_cache_key) == (True, "flex", "conv-1")
    assert parsed.end_user == "hashed-user"
    assert parse_chat_completion(body(user="old-style")).end_user == "old-style"
    assert parse_chat_completion(body()).options.store is False  # OpenAI's default for chat completions


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("own", "requested", "used"),
    [
        ("plus", None, "plus"),
        ("plus", "auto", "plus"),
        ("plus", "default", "plus"),
        ("plus", "priority", "plus"),
        ("plus", "scale", "plus"),
        ("plus", "flex", "free"),
        ("batch", "flex", "batch"),  # no tier below it
        ("plus", "pro", "plus"),  # never above the user's own
        ("plus", "batch", "batch"),
        ("plus", "plus", "plus"),
    ],
)
def test_service_tier_maps_onto_the_tiers_never_above_the_users(own: str, requested: str | None, used: str) -> None:
    user = UserFactory.with_tier(own)
    assert service_tier_for(user=user, requested=requested).name == used


@pytest.mark.django_db
def test_an_unknown_service_tier_names_the_choices() -> None:
    with pytest.raises(OpenAIRequestError) as caught:
        service_tier_for(user=UserFactory.create(), requested="gold")
    assert caught.value.param == "service_tier"
    assert "flex" in caught.value.message and "batch" in caught.value.message
    assert Tier.objects.filter(name="gold").count() == 0


@pytest.mark.django_db
def test_the_same_prompt_cache_key_finds_the_worker_of_the_users_latest_run() -> None:
    user = UserFactory.create()
    RunFactory.create(user=user, prompt_cache_key="conv-1", worker="gpu-a@host")
    RunFactory.create(user=user, prompt_cache_key="conv-1", worker="gpu-b@host")
    RunFactory.create(user=user, prompt_cache_key="conv-2", worker="gpu-c@host")
    RunFactory.create(user=UserFactory.create(), prompt_cache_key="conv-1", worker="gpu-d@host")  # another user's
    assert prompt_cache_key_worker(user=user, prompt_cache_key="conv-1") == "gpu-b@host"
    assert prompt_cache_key_worker(user=user, prompt_cache_key="conv-3") == ""
    assert prompt_cache_key_worker(user=user, prompt_cache_key="") == ""


@pytest.mark.django_db
def test_an_api_chat_is_planned_exactly_as_sent_and_a_ui_chat_keeps_the_default(settings: Any) -> None:
    chat = ChatFactory.create(origin=ChatOrigin.API)
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="Hi")
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content="Hello.")
    MessageFactory.create(chat=chat, role=MessageRole.SYSTEM, content="Answer in French.")
    last = MessageFactory.create(chat=chat, role=MessageRole.USER, content="Name a colour.")
    plan = plan_chat_prompt(chat=chat, user_message=last, context_limit_tokens=2048, max_tokens=64)
    assert plan.messages == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Name a colour."},
    ]
    web = ChatFactory.create(origin=ChatOrigin.WEB)
    first = MessageFactory.create(chat=web, role=MessageRole.USER, content="Hi")
    plan = plan_chat_prompt(chat=web, user_message=first, context_limit_tokens=2048, max_tokens=64)
    assert plan.messages[0] == {"role": "system", "content": settings.CONTEXT.system_prompt}


@pytest.mark.django_db
def test_leading_system_messages_are_kept_when_older_turns_are_dropped() -> None:
    chat = ChatFactory.create(origin=ChatOrigin.API)
    MessageFactory.create(chat=chat, role=MessageRole.SYSTEM, content="Answer in French.")
    MessageFactory.create(chat=chat, role=MessageRole.DEVELOPER, content="Be brief.")
    for index in range(12):
        MessageFactory.create(chat=chat, role=MessageRole.USER, content=f"question {index} " + "word " * 60)
        MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content="answer " * 60)
    last = MessageFactory.create(chat=chat, role=MessageRole.USER, content="Last one.")
    plan = plan_chat_prompt(chat=chat, user_message=last, context_limit_tokens=600, max_tokens=64)
    assert plan.dropped_turns > 0
    assert plan.messages[:2] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "developer", "content": "Be brief."},
    ]
    assert plan.messages[-1] == {"role": "user", "content": "Last one."}
