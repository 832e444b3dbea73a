"""Streamed tool calls: text pieces as OpenAI ``delta.tool_calls`` (``openai_api.tools.streaming``; pure)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from openai_api.tools.calls import tool_calls_from_text
from openai_api.tools.parsing import ToolMode
from openai_api.tools.streaming import ToolCallStream


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
