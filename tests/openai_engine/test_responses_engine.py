"""``/v1/responses`` on the real engine (vLLM, SmolLM2 on the CPU) through the whole stack, driven by the official
``openai`` client and by openai-agents' default model (``OpenAIResponsesModel``): a plain answer, a JSON schema from
``text.format`` that constrains it, and a function tool's round trip (the call, then its output handed back with
``previous_response_id`` or as the whole conversation of items)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel
from rest_framework.authtoken.models import Token

from chats.models import MessageRole
from openai_api.responses.models import ResponseRecord
from tests.live_stack import LiveStack
from tests.openai_engine.test_parity_engine import MODEL, PERSON, WEATHER_TOOL, client_for, roomy_user

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

WEATHER: dict[str, Any] = {"type": "function", **WEATHER_TOOL["function"]}  # type: ignore[dict-item]  # flat shape
NAMED = {"type": "function", "name": "get_weather"}
QUESTION = "What is the weather in Paris?"


def respond(client: openai.OpenAI, **kwargs: Any) -> Any:
    """``client.responses.create`` (its overloads do not type plain dicts)."""
    return client.responses.create(model=MODEL, **kwargs)


def test_a_plain_answer(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    response = respond(client, input="What is the capital of France?", max_output_tokens=20, temperature=0)
    assert response.status in ("completed", "incomplete")
    assert "Paris" in response.output_text


def test_text_format_json_schema_constrains_the_answer(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    response = respond(
        client,
        input="Invent a person: their name and age, as JSON.",
        max_output_tokens=60,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
    )
    jsonschema.validate(json.loads(response.output_text), PERSON)


def _call(response: Any) -> Any:
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    return call


def test_a_function_tool_round_trip(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    asked = respond(client, input=QUESTION, tools=[WEATHER], tool_choice=NAMED, max_output_tokens=60, temperature=0)
    call = _call(asked)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 21, "sky": "sunny"}'}
    # Continued from the stored response: its call is the history, the output answers it.
    answered = respond(
        client,
        previous_response_id=asked.id,
        input=[result],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=40,
        temperature=0,
    )
    assert answered.output[0].type == "message" and answered.output_text.strip()
    run = ResponseRecord.objects.get(public_id=answered.id).run
    roles = list(run.chat.messages.order_by("id").values_list("role", flat=True))
    # No instructions, and tool_choice "none" now: no system message (the first call's tool listing is not carried).
    assert roles == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL, "assistant"]
    # The same conversation sent whole, as a stateless client (openai-agents with store off) sends it.
    whole = respond(
        client,
        input=[{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True), result],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=40,
        temperature=0,
        store=False,
    )
    assert whole.output_text == answered.output_text  # greedy: the same prompt, the same answer


def test_a_streamed_function_call_sends_its_arguments_as_deltas(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    events = list(
        respond(
            client,
            input=QUESTION,
            tools=[WEATHER],
            tool_choice=NAMED,
            max_output_tokens=60,
            temperature=0,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert deltas == done.arguments
    call = _call(events[-1].response)  # type: ignore[union-attr]
    assert call.arguments == done.arguments and call.id == done.item_id


class City(BaseModel):
    name: str
    country: str


def test_an_openai_agents_agent_with_its_default_responses_model(live_stack: LiveStack) -> None:
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)  # nothing leaves this machine
    key = Token.objects.create(user=roomy_user()).key
    client = openai.AsyncOpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=180)
    model = OpenAIResponsesModel(model=MODEL, openai_client=client)
    settings = ModelSettings(temperature=0, max_tokens=60)
    plain = Agent(name="geo", instructions="Answer in one sentence.", model=model, model_settings=settings)
    answer = Runner.run_sync(plain, "What is the capital of France?")
    assert "Paris" in str(answer.final_output)
    typed = Agent(name="city", instructions="Name a city.", model=model, model_settings=settings, output_type=City)
    city = Runner.run_sync(typed, "Name a big city in Japan.").final_output
    assert isinstance(city, City) and city.name and city.country


def _auto_items(output: list[Any]) -> list[tuple[str, str]]:
    """Each item as (type, text or arguments), checked against what "auto" allows: one message whose text does not
    start a call, or function calls whose arguments validate against the tool's schema."""
    if output[0].type == "message":
        (message,) = output
        text = message.content[0].text
        assert not text.startswith("[")
        return [("message", text)]
    for item in output:
        assert item.type == "function_call" and item.name == "get_weather"
        jsonschema.validate(json.loads(item.arguments), WEATHER["parameters"])
    return [("function_call", item.arguments) for item in output]


def test_tools_with_the_default_tool_choice_auto_answer_text_or_a_valid_call_streamed_or_not(
    live_stack: LiveStack,
) -> None:
    """No ``tool_choice`` with tools is "auto" (openai-agents' default): the grammar lets the model answer or call."""
    client = client_for(live_stack, roomy_user())
    for question in (QUESTION, "Say hello in French."):
        asked = respond(client, input=question, tools=[WEATHER], max_output_tokens=60, temperature=0)
        assert asked.tool_choice == "auto"
        items = _auto_items(asked.output)
        events = list(
            respond(client, input=question, tools=[WEATHER], max_output_tokens=60, temperature=0, stream=True)
        )
        final = events[-1].response  # type: ignore[union-attr]
        assert _auto_items(final.output) == items  # greedy: the same answer, streamed
        if items[0][0] == "function_call":
            deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
            assert deltas == "".join(arguments for _, arguments in items)
            assert not any(e.type == "response.output_text.delta" for e in events)
        else:
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert text == items[0][1]


def test_an_openai_agents_agent_with_a_function_tool_runs_to_a_final_output(live_stack: LiveStack) -> None:
    """openai-agents sends ``tool_choice`` unset (auto) with its tools; whether the model calls the tool (the agent
    runs it and asks again) or answers, the run ends with a final output and no error."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny, 21 C"

    key = Token.objects.create(user=roomy_user()).key
    client = openai.AsyncOpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=180)
    model = OpenAIResponsesModel(model=MODEL, openai_client=client)
    agent = Agent(
        name="weather",
        instructions="Use the tool to answer.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=60),
        tools=[get_weather],
    )
    result = Runner.run_sync(agent, QUESTION, max_turns=4)
    assert isinstance(result.final_output, str) and result.final_output.strip()
