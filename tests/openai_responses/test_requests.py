"""``POST /v1/responses`` bodies read into the chat-completion call they mean (no server needed)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from openai_api.errors import OpenAIRequestError
from openai_api.responses.requests import PreviousOutput, parse_response_create
from openai_api.tools.parsing import ToolMode

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def body(**overrides: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **overrides}


def refusal(**overrides: Any) -> OpenAIRequestError:
    with pytest.raises(OpenAIRequestError) as caught:
        parse_response_create(body(**overrides))
    return caught.value


def test_a_string_input_with_instructions_and_the_sampling_parameters() -> None:
    parsed = parse_response_create(
        body(instructions="Be brief.", max_output_tokens=20, temperature=0, top_p=0.5, safety_identifier="u-1")
    )
    chat = parsed.chat
    assert (chat.history, chat.prompt, chat.last_role) == ([("system", "Be brief.")], "hi", "user")
    assert (parsed.instructions, parsed.conversation) == ("Be brief.", [])
    assert chat.sampling.max_tokens == 20 and chat.sampling.spec.temperature == 0.0 and chat.sampling.spec.top_p == 0.5
    assert chat.end_user == "u-1"
    assert parsed.store is True and parsed.metadata == {} and parsed.truncation == "disabled"
    assert parsed.echo["instructions"] == "Be brief." and parsed.echo["tool_choice"] == "none"
    # No instructions: no system message at all (and on /v1 no default is added: the template's own applies).
    plain = parse_response_create(body())
    assert plain.instructions is None and plain.chat.history == []


def test_input_items_messages_parts_and_a_function_call_round_trip() -> None:
    parsed = parse_response_create(
        body(
            input=[
                {"role": "developer", "content": "Answer in French."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            ],
            tools=[WEATHER],
            tool_choice="none",
        )
    )
    chat = parsed.chat
    assert chat.history == [
        ("developer", "Answer in French."),
        ("user", "Weather in Paris?"),
        ("assistant", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'),
    ]
    assert (chat.prompt, chat.last_role) == ("sunny", "tool")
    assert chat.tools.tools[0]["function"]["name"] == "get_weather"


def test_with_the_hermes_parser_declared_past_calls_replay_as_tool_call_blocks(settings: Any) -> None:
    settings.ENGINE = dataclasses.replace(settings.ENGINE, tool_call_parser="hermes")
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    parsed = parse_response_create(body(input=[call, output], tools=[WEATHER]))
    assert parsed.chat.history == [
        ("assistant", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    ]
    assert parsed.chat.tools.call_format == "hermes" and parsed.echo["call_format"] == "hermes"
    previous = PreviousOutput(calls=[("call_1", "get_weather", '{"city": "Paris"}')])
    continued = parse_response_create(body(input=[output], tools=[WEATHER]), previous=previous)
    assert continued.chat.history[0][1].startswith("<tool_call>\n")
    forced = parse_response_create(body(tools=[WEATHER], tool_choice="required"))
    assert forced.echo["call_format"] == ""  # "required" is the array in any format


def test_a_named_tool_choice_and_text_format_json_schema() -> None:
    named = parse_response_create(body(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}))
    assert named.chat.tools.mode is ToolMode.NAMED and named.echo["function_name"] == "get_weather"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    structured = parse_response_create(body(text={"format": {"type": "json_schema", "name": "A", "schema": schema}}))
    assert structured.chat.sampling.spec.structured_outputs == {"json": schema}
    assert parse_response_create(body(text={"format": {"type": "json_object"}})).chat.sampling.spec.structured_outputs
    assert parse_response_create(body(text={"format": {"type": "text"}})).chat.sampling.spec.structured_outputs is None


def test_continuing_puts_the_previous_output_first() -> None:
    previous = PreviousOutput(calls=[("call_x", "get_weather", '{"city":"Oslo"}')])
    parsed = parse_response_create(
        body(
            input=[{"type": "function_call_output", "call_id": "call_x", "output": "snow"}],
            tools=[WEATHER],
            tool_choice="none",
        ),
        previous=previous,
    )
    assert parsed.continues and parsed.new_history == []
    assert parsed.chat.history == [("assistant", '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]')]
    # An output answering no call of the previous response is refused, named as the client sent it.
    with pytest.raises(OpenAIRequestError) as caught:
        parse_response_create(
            body(input=[{"type": "function_call_output", "call_id": "call_y", "output": "snow"}]), previous=previous
        )
    assert caught.value.param == "input[0].call_id"


def test_metadata_is_checked_like_openai() -> None:
    assert parse_response_create(body(metadata={"k": "v"})).metadata == {"k": "v"}
    assert refusal(metadata={f"k{i}": "v" for i in range(17)}).param == "metadata"
    assert refusal(metadata={"k" * 65: "v"}).param == "metadata"
    assert refusal(metadata={"k": "v" * 513}).param == "metadata.k"
    assert refusal(metadata={"k": 1}).param == "metadata.k"
    assert refusal(metadata={"k": "\x00"}).param == "metadata.k"  # Run.metadata is jsonb: no NUL


@pytest.mark.parametrize(
    ("overrides", "param", "code"),
    [
        ({"reasoning": {"effort": "high"}}, "reasoning.effort", "unsupported_parameter"),
        ({"background": True}, "background", "unsupported_parameter"),
        ({"include": ["reasoning.encrypted_content"]}, "include", "unsupported_parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_parameter"),
        ({"text": {"verbosity": "high"}}, "text.verbosity", "unsupported_parameter"),
        ({"frobnicate": 1}, "frobnicate", "unknown_parameter"),
        ({"seed": 1}, "seed", "unknown_parameter"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0].type", "unsupported_parameter"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "unsupported_parameter",
        ),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", None),
        ({"input": []}, "input", None),
        ({"input": "  "}, "input", None),
        ({"instructions": "\ud800"}, "instructions", "invalid_text"),
        ({"max_output_tokens": 0}, "max_output_tokens", None),
        ({"tools": [{**WEATHER, "name": "bad name"}]}, "tools[0].name", None),
        ({"text": {"format": {"type": "json_schema", "name": "A"}}}, "text.format.schema", "invalid_structured_output"),
        ({"truncation": "sometimes"}, "truncation", None),
        ({"text": {"format": {"type": ["text"]}}}, "text.format.type", "invalid_structured_output"),  # was a 500
        ({"store": "yes"}, "store", None),
    ],
)
def test_refusals_name_the_parameter_as_sent(overrides: dict[str, Any], param: str, code: str | None) -> None:
    error = refusal(**overrides)
    assert (error.param, error.code, error.status) == (param, code, 400), error.message
    assert "messages[" not in error.message and "max_completion_tokens" not in error.message
    if code == "unsupported_parameter" and "input" not in param and "tools" not in param:
        assert error.message == f"Unsupported parameter: '{param}' is not supported with this model."


def test_the_defaults_that_ask_for_nothing_are_accepted() -> None:
    parsed = parse_response_create(
        body(reasoning={}, background=False, include=[], store=False, truncation="auto", service_tier="auto")
    )
    assert parsed.store is False and parsed.truncation == "auto"
    assert parse_response_create(body(reasoning={"effort": None})).chat.prompt == "hi"
    assert parse_response_create(body(tools=[], include=[])).chat.tools.tools == []  # as openai-agents sends them
