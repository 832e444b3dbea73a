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


NAMES = ["get_weather", "get_time", "ping"]


@pytest.mark.parametrize("seed", range(5))
def test_auto_text_streams_as_content_only(seed: int) -> None:
    text = "Sunny, 20 degrees. [source: me]"
    stream = ToolCallStream(ToolMode.AUTO, names=NAMES)
    deltas = [stream.delta(p) for p in pieces(text, seed)]
    assert all(set(d) == {"content"} for d in deltas)
    assert "".join(d["content"] for d in deltas) == text
    assert stream.finish() == [] and not stream.called


@pytest.mark.parametrize("seed", range(6))
def test_auto_call_streams_as_tool_calls_that_match_the_finished_answer(seed: int) -> None:
    text = json.dumps(
        [{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "ping", "parameters": {}}], indent=1
    )
    stream = ToolCallStream(ToolMode.AUTO, names=NAMES)
    chunks = [stream.delta(p) for p in pieces(text, seed)]
    assert all("content" not in d for d in chunks)
    streamed = reassemble([d["tool_calls"] for d in chunks if d])
    final = tool_calls_from_text(ToolMode.AUTO, None, text)
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in final
    ]
    assert stream.called and stream.finish() == []


@pytest.mark.parametrize("cut", [5, 18, 30, 45, 60])
@pytest.mark.parametrize("mode", [ToolMode.AUTO, ToolMode.REQUIRED])
def test_a_call_cut_short_streams_the_same_truncated_calls_as_the_finished_answer(cut: int, mode: ToolMode) -> None:
    text = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "get_time", "parameters": {"zone": "U'
    text = text[:cut] if cut < 60 else text
    stream = ToolCallStream(mode, names=NAMES)
    chunks = [stream.feed(p) for p in pieces(text, cut)] + [stream.finish()]
    streamed = reassemble(chunks)
    final = tool_calls_from_text(mode, None, text, names=NAMES)
    assert [(c["name"], c["arguments"]) for c in streamed] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in final
    ]
    if cut >= 18:  # past '[{"name": "get_wea': the one tool it can be
        assert streamed and streamed[0]["name"] == "get_weather"
