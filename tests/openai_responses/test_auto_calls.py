"""An "auto" answer's output items (``openai_api.responses.formats.calls_of``): a call when it starts one, text
otherwise, a call cut short kept with its arguments so far; in the array format and in the hermes one (streamed
too)."""

from __future__ import annotations

import json
from typing import Any

from openai_api.responses.formats import Call, calls_of, output_items
from openai_api.responses.models import ResponseRecord
from openai_api.responses.streaming import _Calls, _Events, call_stream

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


HERMES_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"ci'
)


def test_in_the_hermes_format_tool_call_blocks_are_the_calls() -> None:
    hermes = record(call_format="hermes", public_id="resp_abc")
    assert calls_of(hermes, HERMES_CALLS) == [
        Call(name="get_weather", arguments='{"city": "Paris"}'),
        Call(name="get_weather", arguments='{"ci'),  # cut short
    ]
    assert calls_of(hermes, '[{"name": "get_weather", "parameters": {}}]') == []  # text in this format
    assert calls_of(record(), HERMES_CALLS) == []  # text in the array format
    items = output_items(hermes, HERMES_CALLS, status="incomplete")
    assert [(i["type"], i["name"], i["arguments"], i["status"]) for i in items] == [
        ("function_call", "get_weather", '{"city": "Paris"}', "incomplete"),
        ("function_call", "get_weather", '{"ci', "incomplete"),
    ]
    (message,) = output_items(hermes, "Sunny.", status="completed")
    assert message["type"] == "message" and message["content"][0]["text"] == "Sunny."


def test_in_the_hermes_format_a_call_streams_as_a_function_call_item_at_its_closing_tag() -> None:
    hermes = record(call_format="hermes", public_id="resp_abc")
    stream = call_stream(hermes)
    assert stream is not None and stream.call_format == "hermes"
    calls = _Calls(hermes, _Events(), stream)
    first, rest = HERMES_CALLS.split("\n<tool_call>\n{")
    assert calls.feed(first[:-1]) == []  # the closing tag not yet whole
    events = [json.loads(frame.decode().split("data: ", 1)[1]) for frame in calls.feed(first[-1:])]
    assert [e["type"] for e in events] == ["response.output_item.added", "response.function_call_arguments.delta"]
    assert events[0]["item"]["type"] == "function_call" and events[0]["item"]["name"] == "get_weather"
    assert events[1]["delta"] == '{"city": "Paris"}'
    assert calls.feed("\n<tool_call>\n{" + rest) == []  # cut short: its item comes with the final answer
    assert call_stream(record(tool_mode="none")) is None
