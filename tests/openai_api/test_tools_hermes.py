"""``tool_choice: "auto"`` in vLLM's hermes format (``openai_api.tools.hermes``; pure): the grammar run by
llguidance over sample answers, the calls of a finished or growing answer, and what the other modules make of them
when the declared parser is ``hermes`` (streaming, a finished answer, the history, the tool listing)."""

from __future__ import annotations

import json
import random
from typing import Any

import llguidance
import pytest

from openai_api.tools.calls import finish_reason, parse_tool_output
from openai_api.tools.hermes import CALL_FORM, HermesCall, hermes_calls, hermes_stream_calls
from openai_api.tools.history import tool_turn
from openai_api.tools.parsing import ToolMode, ToolRequest, parse_tools, request_structured_outputs
from openai_api.tools.prompt import tool_prompt
from openai_api.tools.streaming import ToolCallStream
from tests.generation.grammar import accepts

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "ping"}},
]
NAMES = ["get_weather", "ping"]
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'
PING_CALL = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
TWO_CALLS = f"{WEATHER_CALL}\n{PING_CALL}"


def hermes(**body: Any) -> ToolRequest:
    return parse_tools({"tools": TOOLS, **body}, tool_call_parser="hermes")


def grammar_accepts(request: ToolRequest | dict[str, Any] | None, text: str) -> bool:
    structured = request.structured if isinstance(request, ToolRequest) else request
    assert structured is not None and set(structured) == {"grammar"}
    return accepts(llguidance.grammar_from("grammar", structured["grammar"]), text)


# The grammar


def test_the_grammar_allows_text_or_calls_in_the_hermes_form() -> None:
    request = hermes()
    for text in ("Hello there.", "Use <tool_call> tags.", " <b>bold</b>", WEATHER_CALL, PING_CALL, TWO_CALLS):
        assert grammar_accepts(request, text), text
    for text in (
        "",
        "<b>bold</b>",  # text cannot start with <
        "<tool_call>\n{}\n</tool_call>",
        '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c"}}\n</tool_call>',  # city is required
        '<tool_call>\n{"name": "ping", "parameters": {}}\n</tool_call>',  # the array's key, not hermes'
        '<tool_call>{"name": "ping", "arguments": {}}</tool_call>',  # the newlines are part of the form
        WEATHER_CALL + " and more",
    ):
        assert not grammar_accepts(request, text), text
    assert grammar_accepts(request, '[{"name": "ping", "parameters": {}}]')  # text here: only < starts a call


def test_without_parallel_calls_the_grammar_allows_one_call() -> None:
    request = hermes(parallel_tool_calls=False)
    assert grammar_accepts(request, WEATHER_CALL)
    assert not grammar_accepts(request, TWO_CALLS)


def test_with_a_json_object_format_the_answer_is_calls_or_that_object() -> None:
    body = {"tools": TOOLS, "response_format": {"type": "json_object"}}
    structured = request_structured_outputs(body, parse_tools(body, tool_call_parser="hermes"))
    assert grammar_accepts(structured, '{"a": 1}') and grammar_accepts(structured, PING_CALL)
    assert not grammar_accepts(structured, "plain text")


# Reading the calls


def test_complete_calls_read_as_vllm_reads_them() -> None:
    assert hermes_calls(WEATHER_CALL) == [HermesCall("get_weather", json.dumps({"city": "Oslo", "unit": "c"}))]
    assert [c.name for c in hermes_calls(TWO_CALLS)] == ["get_weather", "ping"]
    assert hermes_calls(PING_CALL)[0].arguments == "{}"
    assert hermes_calls("Just text.") == []


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("<tool_c", []),  # no name yet
        ('<tool_call>\n{"name": "get_w', [HermesCall("get_weather", "")]),  # the one tool it can be
        ('<tool_call>\n{"name": "get_weather", "argu', [HermesCall("get_weather", "")]),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os', [HermesCall("get_weather", '{"city": "Os')]),
        (  # the object whole, the closing tag cut: the arguments as a complete call's
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool',
            [HermesCall("get_weather", '{"city": "Oslo"}')],
        ),
        (
            f'{PING_CALL}\n<tool_call>\n{{"name": "get_weather", "arguments": {{"ci',
            [HermesCall("ping", "{}"), HermesCall("get_weather", '{"ci')],
        ),
    ],
)
def test_a_call_cut_short_keeps_what_was_written(text: str, calls: list[HermesCall]) -> None:
    assert hermes_calls(text, NAMES) == calls


def test_a_growing_answer_shows_only_its_closed_calls() -> None:
    assert hermes_stream_calls(WEATHER_CALL[:-1]) == []
    assert [c.name for c in hermes_stream_calls(f"{WEATHER_CALL}\n<tool_call>\n")] == ["get_weather"]


def test_a_finished_answer_is_text_or_tool_calls() -> None:
    auto = hermes()
    assert parse_tool_output(auto, "Sunny. <b>warm</b>").content == "Sunny. <b>warm</b>"
    assert parse_tool_output(auto, '[{"name": "ping", "parameters": {}}]').tool_calls == []  # text in this format
    output = parse_tool_output(auto, TWO_CALLS)
    assert output.content is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in output.tool_calls] == [
        ("get_weather", {"city": "Oslo", "unit": "c"}),
        ("ping", {}),
    ]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in output.tool_calls)
    assert finish_reason(ToolMode.AUTO, "stop", called=output.called) == "tool_calls"
    assert len(parse_tool_output(hermes(parallel_tool_calls=False), TWO_CALLS).tool_calls) == 1
    cut = parse_tool_output(auto, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os')
    assert cut.content is None and [c["function"] for c in cut.tool_calls] == [
        {"name": "get_weather", "arguments": '{"city": "Os'}
    ]
    nothing_yet = parse_tool_output(auto, "<tool")
    assert (nothing_yet.content, nothing_yet.tool_calls) == (None, [])


# Streaming


def pieces(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), k=rng.randint(1, 12)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("seed", range(6))
def test_each_call_streams_whole_when_its_closing_tag_arrives(seed: int) -> None:
    stream = ToolCallStream(ToolMode.AUTO, names=NAMES, call_format="hermes")
    sent: list[tuple[int, int, dict[str, Any]]] = []  # (characters fed before the piece, after it, delta)
    fed = 0
    for piece in pieces(TWO_CALLS, seed):
        delta = stream.delta(piece)
        assert "content" not in delta
        sent += [(fed, fed + len(piece), d) for d in delta.get("tool_calls", [])]
        fed += len(piece)
    closing = (len(WEATHER_CALL), len(TWO_CALLS))  # where each call's closing tag ends
    assert len(sent) == 2 and all(before < end <= after for (before, after, _), end in zip(sent, closing, strict=True))
    deltas = [d for _, _, d in sent]
    assert [(d["index"], d["type"], d["function"]["name"]) for d in deltas] == [
        (0, "function", "get_weather"),
        (1, "function", "ping"),
    ]
    assert [d["function"]["arguments"] for d in deltas] == [c.arguments for c in hermes_calls(TWO_CALLS)]
    assert stream.ids == [d["id"] for d in deltas] and stream.called and stream.finish() == []


def test_a_call_cut_short_goes_out_at_the_finish() -> None:
    stream = ToolCallStream(ToolMode.AUTO, names=NAMES, call_format="hermes")
    assert stream.delta(PING_CALL)["tool_calls"][0]["function"] == {"name": "ping", "arguments": "{}"}
    assert stream.delta('\n<tool_call>\n{"name": "get_weather", "arguments": {"ci') == {}
    (rest,) = stream.finish()
    assert (rest["index"], rest["function"]) == (1, {"name": "get_weather", "arguments": '{"ci'})
    assert stream.finish() == []


def test_text_streams_as_content_and_one_call_only_without_parallel_calls() -> None:
    text = ToolCallStream(ToolMode.AUTO, names=NAMES, call_format="hermes")
    assert [text.delta(p) for p in ("[not", " a call]")] == [{"content": "[not"}, {"content": " a call]"}]
    assert text.finish() == [] and not text.called
    single = ToolCallStream(ToolMode.AUTO, names=NAMES, call_format="hermes", parallel_tool_calls=False)
    assert [d["index"] for d in single.feed(TWO_CALLS)] == [0]


# The prompt and the history


def test_the_tool_listing_describes_the_hermes_form_for_auto_only() -> None:
    auto = tool_prompt(hermes())
    assert auto is not None and CALL_FORM in auto and "plain text" in auto and '"parameters": {<' not in auto
    single = tool_prompt(hermes(parallel_tool_calls=False))
    assert single is not None and "only one call" in single and CALL_FORM in single
    required = tool_prompt(hermes(tool_choice="required"))
    assert required is not None and CALL_FORM not in required and "JSON array" in required


def test_past_calls_are_written_as_tool_call_blocks() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    ping = {"id": "call_2", "type": "function", "function": {"name": "ping", "arguments": ""}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [call, ping]},
    ]
    role, content = tool_turn(messages, 1, call_format="hermes") or ("", "")
    assert role == "assistant"
    assert content == (
        'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n' + PING_CALL
    )
    assert [c.name for c in hermes_calls(content.removeprefix("Checking.\n"))] == ["get_weather", "ping"]
    assert tool_turn(messages, 1) == (
        "assistant",
        'Checking.\n[{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "ping", "parameters": {}}]',
    )
