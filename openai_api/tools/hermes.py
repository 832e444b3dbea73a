"""The ``hermes`` tool-call format (vLLM's ``--tool-call-parser hermes``: Hermes, Qwen 2.5 and 3 and other models
whose chat template teaches it) for ``tool_choice: "auto"``, on a deployment that declares
``ENGINE_TOOL_CALL_PARSER=hermes``.

A call is ``<tool_call>`` + newline + ``{"name": ..., "arguments": {...}}`` + newline + ``</tool_call>``, several
calls one per line. vLLM's parser reads whatever the model wrote; here a grammar (:func:`hermes_auto_grammar`) lets
the model write text or calls in exactly that form, each call's arguments constrained to its tool's schema, so a
call always parses. As in :mod:`openai_api.tools.grammar` the first character tells the branches apart: an answer
that starts with ``<`` is calls (and nothing after them), any other is text.

:func:`hermes_calls` reads a finished answer (a call cut short keeps the arguments written so far);
:func:`hermes_stream_calls` says which calls of a growing answer are complete, for streaming each one when its
closing tag arrives; :func:`render_hermes_calls` writes past calls of the conversation in the same form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HERMES = "hermes"
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_START = "<"
"""The first character of a call; no text answer starts with it."""
TEXT_RULE = r"/[^<](.|\n)*/"
CALL_FORM = '<tool_call>\n{"name": "<function name>", "arguments": {<its arguments>}}\n</tool_call>'
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"\s*(.*?)\s*" + re.escape(CALL_CLOSE), re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_NAME_BEGUN = re.compile(r'"name"\s*:\s*"([^"\\]*)$')
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*')


def hermes_item_schema(calls_schema: dict[str, Any]) -> dict[str, Any]:
    """One call's object (``{name, arguments}``) from the "required" array schema of
    :func:`openai_api.tools.parsing.required_tools_schema`: its ``anyOf`` branches with ``parameters`` named
    ``arguments``, and its hoisted ``$defs``."""
    branches = []
    for branch in calls_schema["items"]["anyOf"]:
        properties = branch["properties"]
        branches.append(
            {
                "properties": {"name": properties["name"], "arguments": properties["parameters"]},
                "required": ["name", "arguments"],
            }
        )
    item: dict[str, Any] = {"type": "object", "anyOf": branches}
    if "$defs" in calls_schema:
        item["$defs"] = calls_schema["$defs"]
    return item


def hermes_auto_grammar(
    calls_schema: dict[str, Any], *, parallel_tool_calls: bool, answer_schema: dict[str, Any] | None = None
) -> str:
    """The Lark grammar (llguidance's dialect) of an "auto" answer in the hermes format: calls, or text (or the
    ``answer_schema`` object of a JSON ``response_format``)."""
    item = json.dumps(hermes_item_schema(calls_schema))
    lines = [
        "start: calls | answer",
        'calls: call ("\\n" call)*' if parallel_tool_calls else "calls: call",
        f'call: "{CALL_OPEN}\\n" %json {item} "\\n{CALL_CLOSE}"',
    ]
    if answer_schema is None:
        lines += ["answer: TEXT", f"TEXT: {TEXT_RULE}"]
    else:
        lines.append(f"answer: %json {json.dumps(answer_schema)}")
    return "\n".join(lines) + "\n"


def starts_a_hermes_call(text: str) -> bool:
    """Whether an answer (finished or still growing) is the call branch of :func:`hermes_auto_grammar`."""
    return text.startswith(CALL_START)


def render_hermes_calls(calls: Sequence[tuple[str, Any]]) -> str:
    """``(name, arguments object)`` calls as the model writes them in this format (one block per call, one per line):
    past calls in the conversation read the way the model is made to write new ones."""
    blocks = (
        f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CALL_CLOSE}"
        for name, arguments in calls
    )
    return "\n".join(blocks)


@dataclass(frozen=True)
class HermesCall:
    name: str
    arguments: str
    """The arguments as JSON text (``json.dumps`` of the object, as vLLM's parser gives them), or as far as they
    were written for a call cut short."""


def _whole(call: Any) -> HermesCall | None:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return HermesCall(call["name"], json.dumps(call.get("arguments", {}), ensure_ascii=False))


def _complete(body: str) -> HermesCall | None:
    try:
        return _whole(json.loads(body))
    except ValueError:
        return None


def _cut_short(body: str, names: Sequence[str]) -> HermesCall | None:
    """A call whose closing tag never came: whole when its object was finished, else its name once known (written,
    or the only declared name that begins with what was written) and its arguments as far as they go."""
    try:
        whole, _ = json.JSONDecoder().raw_decode(body.lstrip())
    except ValueError:
        pass
    else:
        return _whole(whole)
    name = _NAME.search(body)
    if name is None:
        written = _NAME_BEGUN.search(body)
        matching = [n for n in names if written is not None and n.startswith(written[1])]
        return HermesCall(matching[0], "") if len(matching) == 1 else None
    arguments = _ARGUMENTS.search(body, name.end())
    return HermesCall(json.loads(f'"{name[1]}"'), body[arguments.end() :] if arguments else "")


def hermes_stream_calls(text: str) -> list[HermesCall]:
    """The complete calls (closing tag included) of a possibly growing hermes answer, in order."""
    return [call for call in (_complete(m[1]) for m in _BLOCK.finditer(text)) if call is not None]


def hermes_calls(text: str, names: Sequence[str] = ()) -> list[HermesCall]:
    """Every call of a finished hermes answer: the complete ones, then one cut short after the last closing tag
    (``names``: the declared tools, to name a call cut inside its name)."""
    calls = hermes_stream_calls(text)
    tail = text[text.rfind(CALL_CLOSE) + len(CALL_CLOSE) :] if CALL_CLOSE in text else text
    opened = tail.find(CALL_OPEN)
    if opened >= 0:
        cut = _cut_short(tail[opened + len(CALL_OPEN) :], names)
        if cut is not None:
            calls.append(cut)
    return calls
