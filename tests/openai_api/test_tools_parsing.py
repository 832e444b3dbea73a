"""Function tools as vLLM's OpenAI server handles them: ``tools`` and ``tool_choice`` parsed, and the constraint a
forced tool puts on the answer (``openai_api.tools.parsing``; pure: no server, no database)."""

from __future__ import annotations

from typing import Any

import llguidance
import pytest

from generation.sampling import SamplingError
from openai_api.tools.parsing import EMPTY_PARAMETERS, ToolMode, parse_tools, request_structured_outputs
from tests.generation.grammar import accepts, schema_accepts

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


def auto_accepts(structured: dict[str, Any] | None, text: str) -> bool:
    assert structured is not None and set(structured) == {"grammar"}
    return accepts(llguidance.grammar_from("grammar", structured["grammar"]), text)


CALL = '[{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}]'
TWO_CALLS = '[{"name": "ping", "parameters": {}}, {"name": "get_time", "parameters": {"zone": "UTC"}}]'


def test_auto_and_the_default_allow_text_or_a_call() -> None:
    for body in ({"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "auto"}):
        request = parse_tools(body)
        assert request.mode is ToolMode.AUTO
        for text in ("Hello there.", "It is sunny.\n[1] says so", " [not a call]", CALL, TWO_CALLS):
            assert auto_accepts(request.structured, text), text
        for text in (
            "",
            "[not a call",
            '[{"name": "nope", "parameters": {}}]',
            CALL + " and more",
            '[{"name": "get_weather", "parameters": {"unit": "c"}}]',
        ):  # city is required
            assert not auto_accepts(request.structured, text), text


def test_auto_without_parallel_calls_allows_one_call() -> None:
    request = parse_tools({"tools": TOOLS, "parallel_tool_calls": False})
    assert auto_accepts(request.structured, CALL)
    assert not auto_accepts(request.structured, TWO_CALLS)


def test_auto_with_a_declared_parser_takes_hermes_and_refuses_the_others() -> None:
    error = refused({"tools": TOOLS, "tool_choice": "auto"}, parser="mistral")
    assert error.param == "tool_choice"
    assert "'mistral'" in error.message and "['hermes']" in error.message and "unset it" in error.message
    hermes = parse_tools({"tools": TOOLS, "tool_choice": "auto"}, tool_call_parser="hermes")
    assert (hermes.mode, hermes.call_format) == (ToolMode.AUTO, "hermes")
    assert auto_accepts(hermes.structured, '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')
    assert auto_accepts(hermes.structured, CALL)  # as text: in this format only "<" starts a call
    required = parse_tools({"tools": TOOLS, "tool_choice": "required"}, tool_call_parser="mistral")
    assert required.mode is ToolMode.REQUIRED and required.call_format == ""  # no parser needed: the array


def test_auto_with_a_json_object_format_answers_a_call_or_that_object() -> None:
    person = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    body = {"tools": TOOLS, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": person}}}
    structured = request_structured_outputs(body, parse_tools(body))
    assert auto_accepts(structured, '{"name": "Ada"}')
    assert auto_accepts(structured, CALL)
    assert not auto_accepts(structured, "Ada")
    body = {"tools": TOOLS, "response_format": {"type": "json_object"}}
    assert auto_accepts(request_structured_outputs(body, parse_tools(body)), '{"a": 1}')
    for other, param in (
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array"}}}},
            "response_format",
        ),
        ({"structured_outputs": {"regex": "a+"}}, "structured_outputs"),
    ):
        body = {"tools": TOOLS, **other}
        with pytest.raises(SamplingError) as info:
            request_structured_outputs(body, parse_tools(body))
        assert info.value.param == param and "tool_choice 'auto'" in info.value.message


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
