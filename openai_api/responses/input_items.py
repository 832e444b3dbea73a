"""A Responses ``input`` (a string, or a list of input items) as chat-completion ``messages``, and the way back
from a ``messages[...]`` parameter to the ``input[...]`` item it came from.

The items this server reads: messages (roles user, assistant, system, developer; content a string or a list of
``input_text``/``output_text`` parts), ``function_call`` (a call the model made earlier: consecutive calls become one
assistant message with ``tool_calls``) and ``function_call_output`` (its result: a ``tool`` message). Other item
types (images, files, reasoning, item references, hosted tools' calls) are a 400 naming the item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.http.text import echo
from openai_api.errors import OpenAIRequestError

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text")
MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status", "phase"})
PART_KEYS = frozenset({"type", "text", "annotations", "logprobs"})
CALL_KEYS = frozenset({"type", "call_id", "name", "arguments", "id", "status", "namespace"})
OUTPUT_KEYS = frozenset({"type", "call_id", "output", "id", "status"})
TEXT_ONLY = "this model reads text only"


@dataclass
class Translated:
    """The chat ``messages`` of an input, and where each came from (``origins[j]`` names ``messages[j]``'s item, or,
    for merged function calls, ``call_origins[j][k]`` names ``tool_calls[k]``'s)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    call_origins: dict[int, list[str]] = field(default_factory=dict)
    tool_messages: set[int] = field(default_factory=set)

    def add(self, message: dict[str, Any], origin: str) -> None:
        self.messages.append(message)
        self.origins.append(origin)


def _fail(message: str, param: str, code: str | None = None) -> OpenAIRequestError:
    return OpenAIRequestError(message, param=param, code=code)


def _refuse_keys(item: dict[str, Any], allowed: frozenset[str], param: str) -> None:
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise _fail(
            f"Unknown parameter '{param}.{unknown[0]}'. Remove it.", f"{param}.{unknown[0]}", code="unknown_parameter"
        )


def _parts(content: Any, param: str, role: str) -> str | list[dict[str, str]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(f"'{param}' must be a string or a list of input_text parts.", param)
    out: list[dict[str, str]] = []
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if not isinstance(part, dict):
            raise _fail(f'\'{where}\' must be a text part {{"type": "input_text", "text": "..."}}.', where)
        kind = part.get("type")
        if kind not in TEXT_PARTS:
            if kind == "refusal" and role == "assistant" and isinstance(part.get("refusal"), str):
                out.append({"type": "text", "text": part["refusal"]})
                continue
            raise _fail(
                f"'{where}.type' {echo(kind)} is not supported with this model ({TEXT_ONLY}); use 'input_text'.",
                f"{where}.type",
                code="unsupported_parameter",
            )
        _refuse_keys(part, PART_KEYS, where)
        if not isinstance(part.get("text"), str):
            raise _fail(f"'{where}.text' must be a string.", f"{where}.text")
        out.append({"type": "text", "text": part["text"]})
    return out


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    _refuse_keys(item, MESSAGE_KEYS, param)
    role = item.get("role")
    if role not in MESSAGE_ROLES:
        raise _fail(f"'{param}.role' must be one of {', '.join(MESSAGE_ROLES)}; got {echo(role)}.", f"{param}.role")
    if "content" not in item:
        raise _fail(f"'{param}.content' is required.", f"{param}.content")
    return {"role": role, "content": _parts(item["content"], f"{param}.content", role)}


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(f"'{param}.{key}' must be a non-empty string.", f"{param}.{key}")
    return value


def _call(item: dict[str, Any], param: str) -> dict[str, Any]:
    _refuse_keys(item, CALL_KEYS, param)
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise _fail(f"'{param}.arguments' must be a JSON string.", f"{param}.arguments")
    if item.get("namespace") is not None:
        raise _fail(f"'{param}.namespace' is not supported with this model.", f"{param}.namespace")
    return {
        "id": _string(item, "call_id", param),
        "type": "function",
        "function": {"name": _string(item, "name", param), "arguments": arguments},
    }


def _output(item: dict[str, Any], param: str) -> dict[str, Any]:
    _refuse_keys(item, OUTPUT_KEYS, param)
    output = item.get("output")
    if output is None:
        raise _fail(f"'{param}.output' is required: the tool's result.", f"{param}.output")
    return {
        "role": "tool",
        "tool_call_id": _string(item, "call_id", param),
        "content": _parts(output, f"{param}.output", "tool"),
    }


def translate_input(value: Any, into: Translated) -> None:
    """Appends ``input``'s messages to ``into``; raises :class:`OpenAIRequestError` naming ``input[i]...``."""
    if isinstance(value, str):
        into.add({"role": "user", "content": value}, "input")
        return
    if not isinstance(value, list) or not value:
        raise _fail("'input' must be a string or a non-empty list of input items.", "input")
    calls_at: int | None = None  # the assistant message the current run of function_call items goes into
    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise _fail(f"'{param}' must be an input item object (a message, function_call, ...).", param)
        kind = item.get("type", "message")
        if kind == "function_call":
            call = _call(item, param)
            if calls_at is None:
                calls_at = len(into.messages)
                into.add({"role": "assistant", "content": None, "tool_calls": []}, param)
                into.call_origins[calls_at] = []
            into.messages[calls_at]["tool_calls"].append(call)
            into.call_origins[calls_at].append(param)
            continue
        calls_at = None
        if kind == "message":
            into.add(_message(item, param), param)
        elif kind == "function_call_output":
            into.tool_messages.add(len(into.messages))
            into.add(_output(item, param), param)
        else:
            raise _fail(
                f"'{param}.type' {echo(kind)} is not supported with this model: input items may be messages, "
                "function_call and function_call_output.",
                f"{param}.type",
                code="unsupported_parameter",
            )


_MESSAGE_PATH = re.compile(r"messages\[(\d+)\]((?:\.tool_calls\[(\d+)\])?)((?:\.[\w$]+|\[\d+\])*)")
_CALL_FIELDS = {".function.arguments": ".arguments", ".function.name": ".name", ".function": "", ".id": ".call_id"}
_TOOL_FIELDS = {".tool_call_id": ".call_id", ".content": ".output"}


def rename_message_paths(text: str, translated: Translated) -> str:
    """``text`` (a message or a ``param``) with each ``messages[j]...`` path as the ``input[i]...`` it came from."""

    def replace(match: re.Match[str]) -> str:
        j, call, k, rest = int(match.group(1)), match.group(2), match.group(3), match.group(4)
        if j >= len(translated.origins):
            return match.group(0)
        origin = translated.origins[j]
        if not origin.startswith("input["):  # a string input, the instructions, the continued output: one value
            return origin
        if call and j in translated.call_origins and int(k) < len(translated.call_origins[j]):
            origin = translated.call_origins[j][int(k)]
            for old, new in _CALL_FIELDS.items():
                if rest.startswith(old):
                    return origin + new + rest[len(old) :]
            return origin + rest
        if j in translated.tool_messages:
            for old, new in _TOOL_FIELDS.items():
                if rest.startswith(old):
                    return origin + new + rest[len(old) :]
        if j in translated.call_origins and not call:
            return origin
        return origin + rest

    return _MESSAGE_PATH.sub(replace, text)
