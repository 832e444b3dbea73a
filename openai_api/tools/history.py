"""Tool turns in the conversation: assistant ``tool_calls`` messages and ``tool`` messages, checked by
:func:`tool_turn` and stored as plain (role, content) messages: the calls as the "required" array text (the way
this server has the model write calls; ``<tool_call>`` blocks on a deployment that declares the hermes parser), the
result as a ``tool`` message."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from core.http.text import echo, text_problem
from generation.sampling import SamplingError
from openai_api.tools.hermes import HERMES, render_hermes_calls


def _fail(message: str, param: str) -> SamplingError:
    return SamplingError(message, param=param)


def _content_text(content: Any, param: str, *, allow_none: bool) -> str | None:
    if content is None:
        if allow_none:
            return None
        raise _fail(f"'{param}' is required.", param)
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _fail(
                    f'\'{param}[{index}]\' must be a text part {{"type": "text", "text": "..."}}.', f"{param}[{index}]"
                )
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise _fail(f"'{param}' must be a string or a list of text parts.", param)
    problem = text_problem(text, nul_ok=True)  # stored as a message's content (core.nul_text)
    if problem is not None:
        raise _fail(f"'{param}' {problem}", param)
    return text


def _assistant_calls(message: dict[str, Any], param: str) -> list[tuple[str, str, Any]]:
    """``(id, name, parameters)`` of an assistant message's ``tool_calls``; malformed ``arguments`` become ``{}``
    (vLLM's ``_postprocess_messages``: a bad call in the history must not make every later turn fail)."""
    calls = message.get("tool_calls")
    param = f"{param}.tool_calls"
    if not isinstance(calls, list):
        raise _fail(f"'{param}' must be a list of tool calls.", param)
    out: list[tuple[str, str, Any]] = []
    for index, call in enumerate(calls):
        where = f"{param}[{index}]"
        if not isinstance(call, dict):
            raise _fail(f"'{where}' must be an object {{id, type, function}}.", where)
        if call.get("type", "function") != "function":
            raise _fail(f"'{where}.type' must be 'function'.", f"{where}.type")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _fail(f"'{where}.id' must be a non-empty string.", f"{where}.id")
        if call_id in (c[0] for c in out):
            raise _fail(f"'{where}.id' {echo(call_id)} is used twice in this message.", f"{where}.id")
        function = call.get("function")
        if not isinstance(function, dict):
            raise _fail(f"'{where}.function' must be an object {{name, arguments}}.", f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(f"'{where}.function.name' must be a non-empty string.", f"{where}.function.name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise _fail(f"'{where}.function.arguments' must be a JSON string.", f"{where}.function.arguments")
        for value, field_param in (
            (call_id, f"{where}.id"),
            (name, f"{where}.function.name"),
            (arguments or "", f"{where}.function.arguments"),
        ):
            problem = text_problem(value)
            if problem is not None:
                raise _fail(f"'{field_param}' {problem}", field_param)
        try:
            parsed = json.loads(arguments) if arguments else {}
        except ValueError:
            parsed = {}
        out.append((call_id, name, parsed if isinstance(parsed, dict) else {}))
    return out


def _answered_call_ids(messages: Sequence[Any], index: int) -> set[str] | None:
    """The call ids a ``tool`` message at ``index`` may answer: those of the nearest assistant message with
    ``tool_calls`` before it, when only ``tool`` messages lie between; None when there is no such message."""
    for back in range(index - 1, -1, -1):
        earlier = messages[back]
        if not isinstance(earlier, dict):
            return None
        if earlier.get("role") == "tool":
            continue
        if earlier.get("role") == "assistant" and earlier.get("tool_calls"):
            calls = earlier["tool_calls"]
            return {c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)}
        return None
    return None


def tool_turn(messages: Sequence[Any], index: int, *, call_format: str = "") -> tuple[str, str] | None:
    """The stored ``(role, content)`` of ``messages[index]`` when it is an assistant message with ``tool_calls`` or a
    ``tool`` message; None for any other message (the caller parses those as before).

    Assistant: ``content`` may be null; the calls are stored as the "required" array text
    ``[{"name": ..., "parameters": {...}}]`` after the content (if any), so the history reads the way this server
    has the model write calls; with ``call_format`` ``hermes`` (the declared tool-call parser) as ``<tool_call>``
    blocks instead (:func:`openai_api.tools.hermes.render_hermes_calls`), the model's own form. Tool:
    ``tool_call_id`` must answer a call of the assistant message just before (only other ``tool`` messages between),
    ``content`` is the result; stored with role ``tool``.
    Raises :class:`SamplingError` naming ``messages[i]...``. The caller checks the content's length.
    """
    message = messages[index]
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls") is not None:
        calls = _assistant_calls(message, param)
        text = _content_text(message.get("content"), f"{param}.content", allow_none=True)
        if not calls:  # vLLM drops an empty tool_calls list: a plain assistant message
            if text is None:
                raise _fail(f"'{param}.content' is required unless the message has 'tool_calls'.", f"{param}.content")
            return "assistant", text
        if call_format == HERMES:
            rendered = render_hermes_calls([(name, arguments) for _, name, arguments in calls])
        else:
            rendered = json.dumps([{"name": n, "parameters": p} for _, n, p in calls], ensure_ascii=False)
        return "assistant", f"{text}\n{rendered}" if text and text.strip() else rendered
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _fail(
                f"'{param}.tool_call_id' must be the id of the tool call this answers.", f"{param}.tool_call_id"
            )
        answerable = _answered_call_ids(messages, index)
        if answerable is None:
            raise _fail(
                f"'{param}': a message with role 'tool' must answer a preceding assistant message with 'tool_calls'.",
                param,
            )
        if call_id not in answerable:
            raise _fail(
                f"'{param}.tool_call_id' {echo(call_id)} is not one of the preceding assistant message's tool calls "
                f"({sorted(answerable)}).",
                f"{param}.tool_call_id",
            )
        return "tool", _content_text(message.get("content"), f"{param}.content", allow_none=False) or ""
    return None
