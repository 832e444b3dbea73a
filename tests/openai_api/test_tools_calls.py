"""Tool calls found in a finished answer, and the finish reason they give (``openai_api.tools.calls``; pure)."""

from __future__ import annotations

import json

import pytest

from openai_api.tools.calls import finish_reason, tool_calls_from_text
from openai_api.tools.parsing import ToolMode


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
