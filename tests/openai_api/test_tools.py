"""Function tools as vLLM's OpenAI server handles them: parsing, the constraint, tool calls from the answer,
streamed deltas and tool messages in the history (pure: no server, no database)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from generation.sampling import SamplingError
from openai_api.tools import (
    EMPTY_PARAMETERS,
    ToolCallStream,
    ToolMode,
    finish_reason,
    parse_tools,
    request_structured_outputs,
    tool_calls_from_text,
    tool_turn,
)
from tests.generation.grammar import schema_accepts

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}


def tool(name: str, parameters: dict[str, Any] | None = None, **function: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, **function}
    if parameters is not None:
        spec["parameters"] = parameters
    return {"type": "function", "function": spec}


TOOLS = [tool("get_weather", WEATHER, description="Weather now"), tool("get_time", TIME), tool("ping")]


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def refused(body: dict[str, Any], *, parser: str = "") -> SamplingError:
    with pytest.raises(SamplingError) as info:
        parse_tools(body, tool_call_parser=parser)
    return info.value


# Parsing


def test_no_tools_is_no_constraint() -> None:
    request = parse_tools({})
    assert (request.tools, request.mode, request.structured) == ([], ToolMode.NONE, None)
    assert parse_tools({"tool_choice": "none"}).mode is ToolMode.NONE


def test_named_choice_constrains_to_exactly_the_functions_parameters() -> None:
    request = parse_tools({"tools": TOOLS, "tool_choice": named("get_weather")})
    assert request.mode is ToolMode.NAMED
    assert request.function_name == "get_weather"
    assert request.structured == {"json": WEATHER}
    assert request.tools[0] == {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather now", "parameters": WEATHER},
    }
    # a tool without parameters still takes an object
    assert parse_tools({"tools": TOOLS, "tool_choice": named("ping")}).structured == {"json": EMPTY_PARAMETERS}


def test_none_renders_the_tools_without_a_constraint() -> None:
    request = parse_tools({"tools": TOOLS, "tool_choice": "none"})
    assert request.mode is ToolMode.NONE
    assert request.structured is None
    assert [t["function"]["name"] for t in request.tools] == ["get_weather", "get_time", "ping"]


def test_required_schema_accepts_arrays_of_calls_and_rejects_unknown_names() -> None:
    request = parse_tools({"tools": TOOLS, "tool_choice": "required"})
    assert request.mode is ToolMode.REQUIRED
    assert request.structured is not None
    schema = request.structured["json"]
    assert schema_accepts(schema, '[{"name": "get_weather", "parameters": {"city": "Paris"}}]')
    assert schema_accepts(
        schema, '[{"name": "get_time", "parameters": {"zone": "UTC"}}, {"name": "ping", "parameters": {}}]'
    )
    assert not schema_accepts(schema, '[{"name": "get_stock", "parameters": {}}]')
    assert not schema_accepts(schema, '[{"name": "get_weather", "parameters": {"zone": "UTC"}}]')  # get_time's
    assert not schema_accepts(schema, "[]")  # at least one call
    assert not schema_accepts(schema, '{"name": "ping", "parameters": {}}')  # an array, not one object


def test_required_without_parallel_calls_allows_one_call() -> None:
    request = parse_tools({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False})
    assert request.structured is not None
    schema = request.structured["json"]
    assert schema_accepts(schema, '[{"name": "ping", "parameters": {}}]')
    assert not schema_accepts(schema, '[{"name": "ping", "parameters": {}}, {"name": "ping", "parameters": {}}]')


def test_required_hoists_defs_so_references_resolve() -> None:
    with_defs: dict[str, Any] = {
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/place"}},
        "required": ["where"],
        "$defs": {"place": {"type": "string", "enum": ["home", "work"]}},
    }
    tools = [tool("go", with_defs), tool("ping")]
    request = parse_tools({"tools": tools, "tool_choice": "required"})
    assert request.structured is not None
    schema = request.structured["json"]
    assert schema["$defs"] == {"place": with_defs["$defs"]["place"]}
    assert schema_accepts(schema, '[{"name": "go", "parameters": {"where": "home"}}]')
    assert not schema_accepts(schema, '[{"name": "go", "parameters": {"where": "mars"}}]')
    assert "$defs" in tools[0]["function"]["parameters"]  # the caller's definitions are not modified
    clash = [tool("a", {**with_defs}), tool("b", {**with_defs, "$defs": {"place": {"type": "integer"}}})]
    assert refused({"tools": clash, "tool_choice": "required"}).param == "tools[1].function.parameters.$defs"


def test_auto_and_the_default_need_a_parser() -> None:
    for body in ({"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "auto"}):
        error = refused(body)
        assert error.param == "tool_choice"
        assert "needs a tool-call parser; this deployment declares none (set ENGINE_TOOL_CALL_PARSER)" in error.message
    error = refused({"tools": TOOLS, "tool_choice": "auto"}, parser="hermes")
    assert "'hermes'" in error.message


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"tool_choice": "required"}, "tool_choice", "'tools' must be set"),
        ({"tools": []}, "tools", "empty"),
        ({"tools": {"a": 1}}, "tools", "list"),
        ({"tools": ["get_weather"]}, "tools[0]", "must be an object"),
        ({"tools": [{"type": "retrieval", "function": {"name": "a"}}]}, "tools[0].type", "'function'"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "must be an object"),
        ({"tools": [tool("a b")]}, "tools[0].function.name", "letters"),
        ({"tools": [tool("x" * 65)]}, "tools[0].function.name", "letters"),
        ({"tools": [tool("a"), tool("a")]}, "tools[1].function.name", "twice"),
        ({"tools": [tool("a", description=3)]}, "tools[0].function.description", "string"),
        ({"tools": [tool("a", strict="yes")]}, "tools[0].function.strict", "true or false"),
        ({"tools": [tool("a", examples=[])]}, "tools[0].function.examples", "does not take"),
        (
            {"tools": [{"type": "function", "function": {"name": "a", "parameters": [1]}}]},
            "tools[0].function.parameters",
            "JSON schema object",
        ),
        ({"tools": [tool("a", {"type": "objec"})]}, "tools[0].function.parameters", "Invalid type"),
        ({"tools": [tool("a", {"$defs": []})]}, "tools[0].function.parameters.$defs", "must be an object"),
        ({"tools": TOOLS, "tool_choice": named("get_stock")}, "tool_choice.function.name", "not one of"),
        ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice.function", "Correct usage"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name", "Correct"),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", "Invalid value"),
        ({"tools": TOOLS, "tool_choice": "none", "parallel_tool_calls": "no"}, "parallel_tool_calls", "true or false"),
    ],
)
def test_malformed_tools_are_400s_naming_the_parameter(body: dict[str, Any], param: str, says: str) -> None:
    error = refused(body)
    assert error.param == param
    assert says in error.message


def test_a_forced_tool_overrides_response_format_and_refuses_a_structured_outputs_constraint() -> None:
    body: dict[str, Any] = {
        "tools": TOOLS,
        "tool_choice": named("get_time"),
        "response_format": {"type": "json_object"},
    }
    assert request_structured_outputs(body, parse_tools(body)) == {"json": TIME}
    body = {"tools": TOOLS, "tool_choice": named("get_time"), "structured_outputs": {"regex": "a"}}
    with pytest.raises(SamplingError) as info:
        request_structured_outputs(body, parse_tools(body))
    assert info.value.param == "structured_outputs"
    # a malformed response_format is still a 400 when a tool is forced
    body = {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "yaml"}}
    with pytest.raises(SamplingError):
        request_structured_outputs(body, parse_tools(body))
    # without a forced tool the body's own constraint applies
    body = {"tools": TOOLS, "tool_choice": "none", "response_format": {"type": "json_object"}}
    assert request_structured_outputs(body, parse_tools(body)) == {"json_object": True}


# Tool calls from the answer


def test_named_tool_call_round_trip() -> None:
    text = '{"city": "Paris", "unit": "c"}'
    calls = tool_calls_from_text(ToolMode.NAMED, "get_weather", text)
    assert len(calls) == 1
    assert calls[0]["type"] == "function"
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "get_weather", "arguments": text}
    assert tool_calls_from_text(ToolMode.NAMED, "get_weather", "  ") == []


def test_required_tool_calls_round_trip_with_unique_ids() -> None:
    items = [
        {"name": "get_weather", "parameters": {"city": "Zürich"}},
        {"name": "get_time", "parameters": {"zone": "CET"}},
    ]
    calls = tool_calls_from_text(ToolMode.REQUIRED, None, json.dumps(items, indent=1))
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [i["parameters"] for i in items]
    assert "Zürich" in calls[0]["function"]["arguments"]  # ensure_ascii=False, as vLLM
    assert len({c["id"] for c in calls}) == 2


@pytest.mark.parametrize("text", ['[{"name": "get_weather", "parameters": {"ci', '{"name": "x"}', "[1]", ""])
def test_an_answer_that_is_not_an_array_of_calls_gives_no_call(text: str) -> None:
    assert tool_calls_from_text(ToolMode.REQUIRED, None, text) == []


def test_no_calls_in_other_modes_and_finish_reasons() -> None:
    assert tool_calls_from_text(ToolMode.NONE, None, '[{"name": "ping", "parameters": {}}]') == []
    assert finish_reason(ToolMode.REQUIRED, "stop", called=True) == "tool_calls"
    assert finish_reason(ToolMode.REQUIRED, "length", called=True) == "length"
    assert finish_reason(ToolMode.NAMED, "stop", called=True) == "stop"
    assert finish_reason(ToolMode.NONE, "stop", called=False) == "stop"


# Streaming


def pieces(text: str, seed: int) -> list[str]:
    """``text`` cut at random places, as coalesced deltas arrive."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def reassemble(deltas: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What an OpenAI client builds from the streamed ``delta.tool_calls`` (as the ``openai`` SDK's helpers do)."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in deltas:
        for delta in chunk:
            call = calls.setdefault(delta["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in delta:
                assert call["id"] is None, "an id is announced once"
                call["id"] = delta["id"]
                assert delta["type"] == "function"
                call["name"] = delta["function"]["name"]
            else:
                assert "name" not in delta["function"]
            call["arguments"] += delta["function"]["arguments"]
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("seed", range(5))
def test_named_streaming_announces_once_then_sends_argument_fragments(seed: int) -> None:
    text = '{"city": "Paris", "unit": "c"}'
    stream = ToolCallStream(ToolMode.NAMED, "get_weather")
    deltas = [stream.feed(p) for p in pieces(text, seed)]
    first = deltas[0][0]
    assert set(first) == {"index", "id", "type", "function"}
    assert first["function"]["name"] == "get_weather"
    assert all(set(d) == {"index", "function"} for chunk in deltas[1:] for d in chunk)
    (call,) = reassemble(deltas)
    assert call["arguments"] == tool_calls_from_text(ToolMode.NAMED, "get_weather", text)[0]["function"]["arguments"]
    assert stream.called and stream.ids == [call["id"]]
    assert stream.feed("") == []


@pytest.mark.parametrize("seed", range(8))
def test_required_streaming_reassembles_to_the_same_calls(seed: int) -> None:
    text = json.dumps(
        [
            {"name": "get_weather", "parameters": {"city": 'Pa\\"ris ]}', "unit": "c"}},
            {"name": "ping", "parameters": {}},
            {"name": "get_time", "parameters": {"zone": "UTC"}},
        ]
    )
    stream = ToolCallStream(ToolMode.REQUIRED)
    deltas = [stream.feed(p) for p in pieces(text, seed)]
    streamed = reassemble(deltas)
    final = tool_calls_from_text(ToolMode.REQUIRED, None, text)
    assert [c["name"] for c in streamed] == [c["function"]["name"] for c in final]
    assert [json.loads(c["arguments"]) for c in streamed] == [json.loads(c["function"]["arguments"]) for c in final]
    assert len(set(stream.ids)) == 3


def test_required_streaming_waits_for_a_complete_name() -> None:
    stream = ToolCallStream(ToolMode.REQUIRED)
    assert stream.feed('[{"name": "get_wea') == []
    assert stream.feed('ther", "parameters": ') == []  # the value has not started
    (delta,) = stream.feed('{"ci')
    assert delta["function"] == {"name": "get_weather", "arguments": '{"ci'}
    assert stream.feed('ty": "X"}}') == [{"index": 0, "function": {"arguments": 'ty": "X"}'}}]
    assert stream.feed("]") == []


def test_required_streaming_without_parallel_calls_sends_only_the_first() -> None:
    stream = ToolCallStream(ToolMode.REQUIRED, parallel_tool_calls=False)
    text = '[{"name": "ping", "parameters": {}}, {"name": "ping", "parameters": {}}]'
    assert [d["index"] for d in stream.feed(text)] == [0]


def test_other_modes_stream_no_tool_calls() -> None:
    stream = ToolCallStream(ToolMode.NONE)
    assert stream.feed('[{"name": "ping", "parameters": {}}]') == []
    assert not stream.called


# History


def assistant_call(
    call_id: str = "call_1", name: str = "get_weather", arguments: str = '{"city": "Paris"}'
) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def history(*messages: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Weather in Paris?"}, *messages]


def test_tool_calls_and_results_are_stored_as_renderable_turns() -> None:
    messages = history(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [assistant_call(), assistant_call("call_2", "get_time", '{"zone": "CET"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "12:00"}]},
    )
    assert tool_turn(messages, 0) is None  # a plain message: the caller's
    role, content = tool_turn(messages, 1) or ("", "")
    assert role == "assistant"
    # the calls read as the "required" array the model writes, so the stored history round-trips to tool calls
    assert [c["function"]["name"] for c in tool_calls_from_text(ToolMode.REQUIRED, None, content)] == [
        "get_weather",
        "get_time",
    ]
    assert json.loads(content)[0] == {"name": "get_weather", "parameters": {"city": "Paris"}}
    assert tool_turn(messages, 2) == ("tool", '{"temp_c": 21}')
    assert tool_turn(messages, 3) == ("tool", "12:00")


def test_assistant_text_is_kept_before_the_calls_and_bad_arguments_become_empty() -> None:
    messages = history({"role": "assistant", "content": "Checking.", "tool_calls": [assistant_call(arguments="{bad")]})
    assert tool_turn(messages, 1) == ("assistant", 'Checking.\n[{"name": "get_weather", "parameters": {}}]')
    plain = history({"role": "assistant", "content": "Hi", "tool_calls": []})
    assert tool_turn(plain, 1) == ("assistant", "Hi")


@pytest.mark.parametrize(
    ("messages", "param", "says"),
    [
        (history({"role": "assistant", "tool_calls": "x"}), "messages[1].tool_calls", "list"),
        (history({"role": "assistant", "tool_calls": ["x"]}), "messages[1].tool_calls[0]", "object"),
        (
            history({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}),
            "messages[1].tool_calls[0].id",
            "non-empty",
        ),
        (
            history({"role": "assistant", "tool_calls": [{**assistant_call(), "type": "code"}]}),
            "messages[1].tool_calls[0].type",
            "'function'",
        ),
        (
            history({"role": "assistant", "tool_calls": [{"id": "c", "function": "f"}]}),
            "messages[1].tool_calls[0].function",
            "object",
        ),
        (
            history({"role": "assistant", "tool_calls": [assistant_call(name="")]}),
            "messages[1].tool_calls[0].function.name",
            "non-empty",
        ),
        (
            history(
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}
            ),
            "messages[1].tool_calls[0].function.arguments",
            "JSON string",
        ),
        (
            history({"role": "assistant", "tool_calls": [assistant_call(), assistant_call()]}),
            "messages[1].tool_calls[1].id",
            "twice",
        ),
        (
            history({"role": "assistant", "tool_calls": [assistant_call(arguments='{"a": "\x00"}')]}),
            "messages[1].tool_calls[0].function.arguments",
            "NUL",
        ),
        (
            history({"role": "assistant", "content": 5, "tool_calls": [assistant_call()]}),
            "messages[1].content",
            "string",
        ),
        (history({"role": "assistant", "content": None, "tool_calls": []}), "messages[1].content", "required"),
        (history({"role": "tool", "tool_call_id": "call_1", "content": "x"}), "messages[1]", "preceding assistant"),
        (
            history({"role": "assistant", "tool_calls": [assistant_call()]}, {"role": "tool", "content": "x"}),
            "messages[2].tool_call_id",
            "id of the tool call",
        ),
        (
            history(
                {"role": "assistant", "tool_calls": [assistant_call()]},
                {"role": "tool", "tool_call_id": "call_9", "content": "x"},
            ),
            "messages[2].tool_call_id",
            "not one of",
        ),
        (
            history(
                {"role": "assistant", "tool_calls": [assistant_call()]}, {"role": "tool", "tool_call_id": "call_1"}
            ),
            "messages[2].content",
            "required",
        ),
        (
            history(
                {"role": "assistant", "tool_calls": [assistant_call()]},
                {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "image_url"}]},
            ),
            "messages[2].content[0]",
            "text part",
        ),
        (
            history(
                {"role": "assistant", "tool_calls": [assistant_call()]},
                {"role": "user", "content": "?"},
                {"role": "tool", "tool_call_id": "call_1", "content": "x"},
            ),
            "messages[3]",
            "preceding assistant",
        ),
    ],
)
def test_invalid_tool_history_is_a_400_naming_the_parameter(
    messages: list[dict[str, Any]], param: str, says: str
) -> None:
    with pytest.raises(SamplingError) as info:
        for index in range(len(messages)):
            tool_turn(messages, index)
    assert info.value.param == param
    assert says in info.value.message
