"""The tool calls of a finished answer: OpenAI ``message.tool_calls`` from the text a tool choice constrained, the
calls' ids, and the finish reason a call gives (``tool_calls`` or the engine's).

:func:`parse_tool_output` is the one entry point for a finished answer (any endpoint that serves function tools):
given the request's :class:`~openai_api.tools.parsing.ToolRequest` and the text, it says whether the answer is text
or calls. An answer cut short (``max_tokens``) inside a call is still a call: its arguments are the text written so
far (:func:`openai_api.tools.scan.partial_calls`), never content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from openai_api.tools.grammar import starts_a_call
from openai_api.tools.hermes import HERMES, hermes_calls
from openai_api.tools.parsing import ToolMode, ToolRequest
from openai_api.tools.scan import partial_calls


def new_tool_call_id() -> str:
    """OpenAI's shape: ``call_`` and 24 random characters; unique per call."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_tool_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def _array_calls(text: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """The calls of a "required" array: a complete one as vLLM reads it (``arguments`` = ``json.dumps(parameters)``),
    one cut short call by call as far as it goes."""
    try:
        items = json.loads(text)
    except ValueError:
        items = None
    if isinstance(items, list) and all(
        isinstance(i, dict)
        and isinstance(i.get("name"), str)
        and isinstance(i.get("parameters", {}), (dict, type(None)))
        for i in items
    ):
        return [_call(i["name"], json.dumps(i.get("parameters"), ensure_ascii=False)) for i in items]
    return [_call(name, arguments) for name, arguments in partial_calls(text, names)]


def tool_calls_from_text(
    mode: ToolMode, tool_name: str | None, text: str, *, names: Sequence[str] = (), call_format: str = ""
) -> list[dict[str, Any]]:
    """OpenAI ``message.tool_calls`` of a finished answer (empty list: no call).

    Named: one call whose ``arguments`` is the answer as generated (nothing when it is blank). Required (and an
    "auto" answer that starts a call): one call per ``{name, parameters}`` item of the array; an array cut short
    gives its calls as far as they go (``names``: the declared tools, to name a call cut inside its name). Other
    modes, and an "auto" text answer: no calls. ``call_format`` ``hermes``: an "auto" call is ``<tool_call>`` blocks
    (:mod:`openai_api.tools.hermes`) instead of the array.
    """
    if mode is ToolMode.NAMED:
        if tool_name is None:
            raise ValueError("a named tool choice needs its tool_name")
        return [_call(tool_name, text)] if text.strip() else []
    if mode is ToolMode.AUTO and not starts_a_call(text, call_format):
        return []
    if mode is ToolMode.AUTO and call_format == HERMES:
        return [_call(call.name, call.arguments) for call in hermes_calls(text, names)]
    if mode in (ToolMode.REQUIRED, ToolMode.AUTO):
        return _array_calls(text, names)
    return []


@dataclass(frozen=True)
class ToolOutput:
    """A finished answer of a request with tools: its text (None when it is a call) and its calls."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def called(self) -> bool:
        return bool(self.tool_calls)


def parse_tool_output(tools: ToolRequest, text: str) -> ToolOutput:
    """Text or calls: a named or "required" answer, or an "auto" answer that chose a call (it starts with ``[``, or
    ``<`` in the hermes format), is a call even when cut short (content None; no call at all only when the text ends
    before any call's name is known, or a named answer is blank); anything else is the text as it is.
    ``parallel_tool_calls: false`` keeps one call (the grammar allows only one already; this guards a stop string or a
    client-built text)."""
    names = [t["function"]["name"] for t in tools.tools]
    is_call = tools.mode in (ToolMode.NAMED, ToolMode.REQUIRED) or (
        tools.mode is ToolMode.AUTO and starts_a_call(text, tools.call_format)
    )
    if not is_call:
        return ToolOutput(content=text)
    calls = tool_calls_from_text(tools.mode, tools.function_name, text, names=names, call_format=tools.call_format)
    if tools.mode is ToolMode.NAMED and not calls:
        return ToolOutput(content=text)  # a blank answer: no arguments to call with
    return ToolOutput(content=None, tool_calls=calls[:1] if not tools.parallel_tool_calls else calls)


def finish_reason(mode: ToolMode, engine_finish_reason: str, *, called: bool) -> str:
    """OpenAI's finish reason: ``tool_calls`` for "required" (and "auto") calls that ended normally, the engine's
    otherwise (a named call ends with ``stop``, as in OpenAI and vLLM; a call cut short ends with ``length``)."""
    if called and engine_finish_reason == "stop" and mode in (ToolMode.REQUIRED, ToolMode.AUTO):
        return "tool_calls"
    return engine_finish_reason
