"""Tool turns in the history: assistant ``tool_calls`` and ``tool`` messages checked and stored
(``openai_api.tools.history``; pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generation.sampling import SamplingError
from openai_api.tools.calls import tool_calls_from_text
from openai_api.tools.history import tool_turn
from openai_api.tools.parsing import ToolMode


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
