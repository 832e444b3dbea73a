"""An "auto" answer's output items (``openai_api.responses.formats.calls_of``): a call when it starts one, text
otherwise, a call cut short kept with its arguments so far."""

from __future__ import annotations

from typing import Any

from openai_api.responses.formats import Call, calls_of
from openai_api.responses.models import ResponseRecord

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


def record(**request: Any) -> ResponseRecord:
    return ResponseRecord(request={"tools": TOOLS, "tool_mode": "auto", "function_name": None, **request})


def test_a_text_answer_has_no_calls() -> None:
    assert calls_of(record(), "It is sunny [probably].") == []


def test_an_answer_that_starts_a_call_is_its_calls() -> None:
    text = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_weather", "parameters": {}}]'
    assert calls_of(record(), text) == [
        Call(name="get_weather", arguments='{"city": "Paris"}'),
        Call(name="get_weather", arguments="{}"),
    ]
    first = Call(name="get_weather", arguments='{"city": "Paris"}')
    assert calls_of(record(parallel_tool_calls=False), text) == [first]


def test_a_call_cut_short_keeps_its_arguments_so_far() -> None:
    (call,) = calls_of(record(), '[{"name": "get_weather", "parameters": {"city": "Par')
    assert call.name == "get_weather" and call.arguments.startswith('{"city": "Par')


def test_without_tools_nothing_is_a_call() -> None:
    assert calls_of(record(tool_mode="none"), '[{"name": "get_weather", "parameters": {}}]') == []
