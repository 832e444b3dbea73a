"""The tools as the model reads them when its chat template shows none (SmolLM2's does not).

vLLM hands ``tools`` to the chat template and nothing else; a template without a tools section leaves the model
blind to them, so a call it is forced or allowed to make would be a guess. Here, when
:func:`deployments.tokenizer.template_renders_tools` says the template ignores them, the leading system message gets
:func:`tool_prompt` (:func:`history_with_tools`): the functions (name, description, parameters schema) and the form
of a call this server's grammars accept (the "required" array, :mod:`openai_api.tools.grammar`; an "auto" call's
``<tool_call>`` blocks in the hermes format, :mod:`openai_api.tools.hermes`), worded for the tool choice. A template
that renders tools gets them the usual way and no text from here. The text is part of the prompt: it counts as
input tokens (SmolLM2: about 65 plus about 67 per small tool, ``bench/tools_auto_cost.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from chats.models import MessageRole
from deployments.tokenizer import template_renders_tools
from openai_api.tools import hermes
from openai_api.tools.parsing import ToolMode, ToolRequest

CALL_FORM = '[{"name": "<function name>", "parameters": {<its arguments>}}]'


def _listing(tools: ToolRequest) -> str:
    lines = []
    for tool in tools.tools:
        function = tool["function"]
        entry = {"name": function["name"]}
        if function.get("description"):
            entry["description"] = function["description"]
        entry["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "\n".join(lines)


def _how_to_call(tools: ToolRequest) -> str:
    """The form a call takes: the "required" array, or in the hermes format an "auto" call's ``<tool_call>`` blocks
    (:mod:`openai_api.tools.hermes`; "required" is the array in either)."""
    if tools.mode is ToolMode.AUTO and tools.call_format == hermes.HERMES:
        if tools.parallel_tool_calls:
            return f"To call functions, answer with only the calls, one per line, each like this:\n{hermes.CALL_FORM}\n"
        return f"To call a function, answer with only one call in this form and nothing else:\n{hermes.CALL_FORM}\n"
    if tools.parallel_tool_calls:
        return f"To call functions, answer with only a JSON array of calls and nothing else: {CALL_FORM}."
    return f"To call a function, answer with only a JSON array holding one call and nothing else: {CALL_FORM}."


def tool_prompt(tools: ToolRequest) -> str | None:
    """The instructions for ``tools`` (None: the tool choice allows no call, or there are no tools)."""
    if not tools.tools or tools.mode is ToolMode.NONE:
        return None
    head = f"You can call these functions (each with the JSON schema of its parameters):\n{_listing(tools)}\n"
    if tools.mode is ToolMode.NAMED:
        return head + f"Call {tools.function_name}: answer with only its arguments, as one JSON object."
    how = _how_to_call(tools)
    how += "" if how.endswith("\n") else " "
    if tools.mode is ToolMode.REQUIRED:
        return head + how + "You must call at least one of them."
    return head + how + "If no function is needed, answer the user in plain text instead."


def history_with_tools(history: Sequence[tuple[str, str]], tools: ToolRequest) -> list[tuple[str, str]]:
    """``history`` (``(role, content)``, in order) with :func:`tool_prompt` when the served model's template renders
    no tools: appended to its leading system message, or as a system message of its own first. Unchanged otherwise.
    No server default is added: on ``/v1`` the prompt is the client's messages (``chats.context``). Call it with
    the request's deployment selected (``using_model``)."""
    text = tool_prompt(tools)
    if text is None or template_renders_tools():
        return list(history)
    if history and history[0][0] == MessageRole.SYSTEM:
        role, content = history[0]
        return [(role, f"{content.rstrip()}\n\n{text}" if content.strip() else text), *history[1:]]
    return [(MessageRole.SYSTEM.value, text), *history]
