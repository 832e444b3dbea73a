"""Tool calls found in a finished answer, and the finish reason they give (``openai_api.tools.calls``; pure)."""

from __future__ import annotations

import json

import pytest

from openai_api.tools.calls import finish_reason, parse_tool_output, tool_calls_from_text
from openai_api.tools.parsing import ToolMode, parse_tools

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "ping"}},
]


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


@pytest.mark.parametrize("text", ['{"name": "x"}', "[1]", "", '[{"na'])
def test_an_answer_that_is_not_an_array_of_calls_gives_no_call(text: str) -> None:
    assert tool_calls_from_text(ToolMode.REQUIRED, None, text) == []


def test_an_array_cut_short_gives_its_calls_as_far_as_they_go() -> None:
    text = '[{"name": "get_time", "parameters": {"zone": "CET"}}, {"name": "get_weather", "parameters": {"ci'
    calls = tool_calls_from_text(ToolMode.REQUIRED, None, text)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_time", '{"zone": "CET"}'),
        ("get_weather", '{"ci'),
    ]
    # cut inside the name: named when the declared tools leave one possibility, else no call yet
    names = ["get_weather", "get_time", "ping"]
    (call,) = tool_calls_from_text(ToolMode.REQUIRED, None, '[{"name": "get_w', names=names)
    assert call["function"] == {"name": "get_weather", "arguments": ""}
    assert tool_calls_from_text(ToolMode.REQUIRED, None, '[{"name": "get_', names=names) == []


def test_no_calls_in_other_modes_and_finish_reasons() -> None:
    assert tool_calls_from_text(ToolMode.NONE, None, '[{"name": "ping", "parameters": {}}]') == []
    assert finish_reason(ToolMode.REQUIRED, "stop", called=True) == "tool_calls"
    assert finish_reason(ToolMode.REQUIRED, "length", called=True) == "length"
    assert finish_reason(ToolMode.NAMED, "stop", called=True) == "stop"
    assert finish_reason(ToolMode.NONE, "stop", called=False) == "stop"


def test_auto_text_is_content_and_a_call_is_tool_calls() -> None:
    auto = parse_tools({"tools": TOOLS})
    assert parse_tool_output(auto, "Hello! [not a call]").content == "Hello! [not a call]"
    assert parse_tool_output(auto, " [x]").tool_calls == []  # the grammar's text branch: it does not start with [
    output = parse_tool_output(auto, '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]')
    assert output.content is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in output.tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert finish_reason(ToolMode.AUTO, "stop", called=output.called) == "tool_calls"
    assert finish_reason(ToolMode.AUTO, "stop", called=False) == "stop"


def test_a_call_cut_short_is_a_truncated_call_not_content() -> None:
    for body in ({"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "required"}):
        output = parse_tool_output(parse_tools(body), '[{"name": "get_weather", "parameters": {"city": "Os')
        assert output.content is None
        assert [c["function"] for c in output.tool_calls] == [{"name": "get_weather", "arguments": '{"city": "Os'}]
        assert finish_reason(parse_tools(body).mode, "length", called=output.called) == "length"
        nothing_yet = parse_tool_output(parse_tools(body), "[")
        assert (nothing_yet.content, nothing_yet.tool_calls) == (None, [])


def test_without_parallel_calls_at_most_one_call_comes_back() -> None:
    single = parse_tools({"tools": TOOLS, "parallel_tool_calls": False})
    text = '[{"name": "ping", "parameters": {}}, {"name": "ping", "parameters": {}}]'
    assert len(parse_tool_output(single, text).tool_calls) == 1
    assert len(parse_tool_output(parse_tools({"tools": TOOLS}), text).tool_calls) == 2
