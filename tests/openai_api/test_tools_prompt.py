"""The tools as the model reads them when its chat template shows none (``openai_api.tools.prompt``), with the
default model's real tokenizer: SmolLM2's template renders no tools, so the system prompt carries them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deployments.tokenizer import apply_chat_template, template_renders_tools
from openai_api.tools.parsing import parse_tools
from openai_api.tools.prompt import CALL_FORM, history_with_tools, tool_prompt

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, {"type": "function", "function": {"name": "ping"}}]


def test_the_default_models_template_renders_no_tools() -> None:
    assert template_renders_tools() is False
    messages = [{"role": "user", "content": "hi"}]
    assert apply_chat_template(messages, tools=TOOLS) == apply_chat_template(messages)


def test_the_prompt_lists_every_tool_and_says_how_to_call_for_each_choice() -> None:
    auto = tool_prompt(parse_tools({"tools": TOOLS}))
    assert auto is not None
    listed = [json.loads(line) for line in auto.splitlines()[1:3]]
    assert listed[0] == {"name": "get_weather", **{k: WEATHER["function"][k] for k in ("description", "parameters")}}
    assert listed[1] == {"name": "ping", "parameters": {"type": "object", "properties": {}}}
    assert CALL_FORM in auto and "plain text" in auto
    required = tool_prompt(parse_tools({"tools": TOOLS, "tool_choice": "required"}))
    assert required is not None and "must call at least one" in required and "plain text" not in required
    single = tool_prompt(parse_tools({"tools": TOOLS, "parallel_tool_calls": False}))
    assert single is not None and "holding one call" in single
    ping: dict[str, Any] = {"type": "function", "function": {"name": "ping"}}
    named = tool_prompt(parse_tools({"tools": TOOLS, "tool_choice": ping}))
    assert named is not None and "Call ping" in named and CALL_FORM not in named
    assert tool_prompt(parse_tools({"tools": TOOLS, "tool_choice": "none"})) is None
    assert tool_prompt(parse_tools({})) is None


def test_the_leading_system_message_gains_the_tools_only_when_the_template_shows_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    auto = parse_tools({"tools": TOOLS})
    text = tool_prompt(auto)
    user = ("user", "hi")
    assert history_with_tools([("system", "Be brief."), user], auto) == [("system", f"Be brief.\n\n{text}"), user]
    # No system message of the client's: one of ours holds the tools alone (no server default on /v1).
    assert history_with_tools([user], auto) == [("system", text), user]
    assert history_with_tools([], auto) == [("system", text)]
    none = parse_tools({"tools": TOOLS, "tool_choice": "none"})
    assert history_with_tools([user], none) == [user]
    monkeypatch.setattr("openai_api.tools.prompt.template_renders_tools", lambda: True)
    assert history_with_tools([("system", "Be brief."), user], auto) == [("system", "Be brief."), user]
