"""The tool calls of a finished answer: OpenAI ``message.tool_calls`` from the text a forced tool constrained, the
calls' ids, and the finish reason a call gives (``tool_calls`` or the engine's)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from openai_api.tools.parsing import ToolMode


def new_tool_call_id() -> str:
    """OpenAI's shape: ``call_`` and 24 random characters; unique per call."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_tool_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_calls_from_text(mode: ToolMode, tool_name: str | None, text: str) -> list[dict[str, Any]]:
    """OpenAI ``message.tool_calls`` of a finished answer (empty list: no call).

    Named: one call whose ``arguments`` is the answer as generated (nothing when it is blank). Required: one call per
    ``{name, parameters}`` item of the array, ``arguments`` = ``json.dumps(parameters)``; an answer that is not such
    an array (cut short by ``max_tokens``, say) gives no call, as in vLLM. Other modes: no calls.
    """
    if mode is ToolMode.NAMED:
        if tool_name is None:
            raise ValueError("a named tool choice needs its tool_name")
        return [_call(tool_name, text)] if text.strip() else []
    if mode is ToolMode.REQUIRED:
        try:
            items = json.loads(text)
        except ValueError:
            return []
        if not isinstance(items, list) or not all(
            isinstance(i, dict)
            and isinstance(i.get("name"), str)
            and isinstance(i.get("parameters", {}), (dict, type(None)))
            for i in items
        ):
            return []
        return [_call(i["name"], json.dumps(i.get("parameters"), ensure_ascii=False)) for i in items]
    return []


def finish_reason(mode: ToolMode, engine_finish_reason: str, *, called: bool) -> str:
    """OpenAI's finish reason: ``tool_calls`` for "required" (and "auto") calls that ended normally, the engine's
    otherwise (a named call ends with ``stop``, as in OpenAI and vLLM)."""
    if called and engine_finish_reason == "stop" and mode in (ToolMode.REQUIRED, ToolMode.AUTO):
        return "tool_calls"
    return engine_finish_reason
