"""Function tools of ``POST /v1/chat/completions``, as vLLM 0.32's OpenAI server handles them, without vLLM.

vLLM (``ChatCompletionRequest.check_tool_usage``, ``ToolParser.adjust_request``, ``tool_parsers/utils.py``
``get_json_schema_from_tools``, ``tool_parsers/streaming.py``, ``parser/abstract_parser.py``) constrains the answer
with structured outputs when the caller forces a tool:

- a named ``tool_choice`` ``{"type": "function", "function": {"name": N}}``: the answer is the arguments object,
  constrained to N's ``parameters`` schema (``{"type": "object", "properties": {}}`` when it has none). It comes
  back as one tool call whose ``arguments`` is the answer text as generated; finish reason unchanged (``stop``).
- ``tool_choice: "required"``: the answer is a JSON array (at least one item, at most one with
  ``parallel_tool_calls: false``) of ``{"name": <one of the tools>, "parameters": <its schema>}``; each item is a
  tool call whose ``arguments`` is ``json.dumps(parameters)``; finish reason ``tool_calls``. Tools' ``$defs`` are
  hoisted to the top of that schema (so ``#/$defs/...`` references still resolve).
- ``tool_choice: "none"`` (and no ``tool_choice`` without tools): the tools are rendered, nothing is constrained.
- ``tool_choice: "auto"`` (the default when ``tools`` are given) needs a tool-call parser; vLLM answers 400 without
  ``--tool-call-parser``. This server implements no parser yet (see :data:`SUPPORTED_TOOL_CALL_PARSERS`): "auto"
  is a 400 that says so, whatever ``ENGINE_TOOL_CALL_PARSER`` declares.

Differences from vLLM, on purpose: vLLM 0.32 also refuses named/"required" without a tool-call parser (its
constraint is built by the parser's ``adjust_request``); here they need none, since the constraint does not depend
on the model's tool-call format. Every tool's ``parameters`` schema must compile (vLLM compiles only the one
in use), unknown keys in a tool are a 400 (vLLM ignores them) and tool names follow OpenAI's rule.

Streaming (:class:`ToolCallStream`) mirrors vLLM: named: the first piece carries ``index``, ``id``, ``type``,
``function.name`` and the start of ``arguments``, later pieces only argument text; "required": the array is
scanned as it grows and each call is announced (id, name, arguments so far) as soon as its name is complete and its
``parameters`` value has started, then only new argument text follows (several calls may share one delta).

History: assistant ``tool_calls`` messages and ``tool`` messages are checked by :func:`tool_turn` and stored as
plain (role, content) messages: the calls as the "required" array text, the result as a ``tool`` message.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.http.text import echo, text_problem
from generation.sampling import SamplingError
from generation.structured_outputs import SCHEMA_NAME, check_compiles, check_storable, structured_from_request

SUPPORTED_TOOL_CALL_PARSERS: frozenset[str] = frozenset()
"""Tool-call parsers this server can run for ``tool_choice: "auto"``: none yet (see the module docstring)."""
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""vLLM's ``_params_or_empty_object``: a tool without parameters still takes a JSON object."""
FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
NAMED_CHOICE_USAGE = 'Correct usage: {"type": "function", "function": {"name": "my_function"}}.'


class ToolMode(StrEnum):
    NONE = "none"
    """No tools, or ``tool_choice: "none"``: nothing constrained, no tool calls parsed."""
    AUTO = "auto"
    """The model decides (needs a tool-call parser)."""
    REQUIRED = "required"
    """At least one call to any of the tools (an array of calls)."""
    NAMED = "named"
    """Exactly one call to the named tool (the arguments object)."""


@dataclass(frozen=True)
class ToolRequest:
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The normalized tool definitions (``Run.tools``), rendered into the prompt by the chat template."""
    mode: ToolMode = ToolMode.NONE
    function_name: str | None = None
    """The forced function (named mode)."""
    parallel_tool_calls: bool = True
    structured: dict[str, Any] | None = None
    """The ``SamplingSpec.structured_outputs`` that constrains the answer (named and required), else None."""


def _fail(message: str, param: str) -> SamplingError:
    return SamplingError(message, param=param)


def _tool(value: Any, index: int) -> dict[str, Any]:
    param = f"tools[{index}]"
    if not isinstance(value, dict):
        raise _fail(f'\'{param}\' must be an object {{"type": "function", "function": {{...}}}}.', param)
    if value.get("type", "function") != "function":
        raise _fail(f"'{param}.type' must be 'function'; got {echo(value.get('type'))}.", f"{param}.type")
    unknown = sorted(set(value) - {"type", "function"})
    if unknown:
        raise _fail(f"'{param}' does not take {unknown}.", f"{param}.{unknown[0]}")
    function = value.get("function")
    param = f"{param}.function"
    if not isinstance(function, dict):
        raise _fail(f"'{param}' must be an object {{name, description?, parameters?, strict?}}.", param)
    unknown = sorted(set(function) - FUNCTION_KEYS)
    if unknown:
        raise _fail(f"'{param}' does not take {unknown}.", f"{param}.{unknown[0]}")
    name = function.get("name")
    if not isinstance(name, str) or not SCHEMA_NAME.match(name):
        raise _fail(
            f"'{param}.name' must be 1 to 64 letters, digits, underscores or dashes; got {echo(name)}.",
            f"{param}.name",
        )
    out: dict[str, Any] = {"name": name}
    description = function.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise _fail(f"'{param}.description' must be a string.", f"{param}.description")
        check_storable(description, f"{param}.description")
        out["description"] = description
    parameters = function.get("parameters")
    if parameters is not None:
        where = f"{param}.parameters"
        if isinstance(parameters, bool) or not isinstance(parameters, dict):
            raise _fail(f"'{where}' must be a JSON schema object.", where)
        check_storable(parameters, where)
        defs = parameters.get("$defs", {})
        if not isinstance(defs, dict):
            raise _fail(f"'{where}.$defs' must be an object; got {type(defs).__name__}.", f"{where}.$defs")
        check_compiles({"json": parameters}, param=where)
        out["parameters"] = parameters
    strict = function.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise _fail(f"'{param}.strict' must be true or false.", f"{param}.strict")
        out["strict"] = strict  # accepted and without effect: forced calls are always constrained to the schema
    return {"type": "function", "function": out}


def named_tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The schema a named ``tool_choice`` constrains to: the function's parameters (vLLM's
    ``_params_or_empty_object``)."""
    parameters = tool["function"].get("parameters")
    return copy.deepcopy(parameters) if parameters else dict(EMPTY_PARAMETERS)


def required_tools_schema(tools: Sequence[dict[str, Any]], *, parallel_tool_calls: bool = True) -> dict[str, Any]:
    """vLLM's ``_get_json_schema_from_tools``: an array of ``{name, parameters}`` items, one ``anyOf`` branch per
    tool, ``$defs`` of all tools hoisted to the top (the same name with two different schemas is a 400)."""
    branches: list[dict[str, Any]] = []
    all_defs: dict[str, Any] = {}
    for index, tool in enumerate(tools):
        function = tool["function"]
        parameters = copy.deepcopy(function.get("parameters"))
        if parameters is not None:
            for name, definition in parameters.pop("$defs", {}).items():
                if name in all_defs and all_defs[name] != definition:
                    raise _fail(
                        f"Tool definition '{name}' has multiple schemas, which is not supported.",
                        f"tools[{index}].function.parameters.$defs",
                    )
                all_defs[name] = definition
        branches.append(
            {
                "properties": {
                    "name": {"type": "string", "enum": [function["name"]]},
                    "parameters": parameters if parameters else dict(EMPTY_PARAMETERS),
                },
                "required": ["name", "parameters"],
            }
        )
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": branches}}
    if not parallel_tool_calls:
        schema["maxItems"] = 1
    if all_defs:
        schema["$defs"] = all_defs
    return schema


def _named_choice(choice: dict[str, Any], names: Sequence[str]) -> str:
    if choice.get("type", "function") != "function":
        raise _fail(f"'tool_choice.type' must be 'function'. {NAMED_CHOICE_USAGE}", "tool_choice.type")
    function = choice.get("function")
    if not isinstance(function, dict):
        raise _fail(
            f"Invalid value for 'tool_choice.function': {echo(function)}. {NAMED_CHOICE_USAGE}", "tool_choice.function"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(
            f"Invalid 'tool_choice.function.name': {echo(name)}. {NAMED_CHOICE_USAGE}", "tool_choice.function.name"
        )
    if name not in names:
        raise _fail(
            f"The tool named in 'tool_choice' ({echo(name)}) is not one of the declared tools: {list(names)}.",
            "tool_choice.function.name",
        )
    return name


def parse_tools(body: dict[str, Any], *, tool_call_parser: str = "") -> ToolRequest:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat-completion body, checked.

    ``tool_call_parser`` is the deployment's declared parser (``ENGINE_TOOL_CALL_PARSER``; empty: none).
    Raises :class:`SamplingError` with ``param`` for what vLLM (or this server, see the module docstring) refuses.
    """
    raw_tools = body.get("tools")
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _fail("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    parallel_tool_calls = parallel is not False
    if raw_tools is None:
        if choice not in (None, "none"):
            raise _fail("When using 'tool_choice', 'tools' must be set.", "tool_choice")
        return ToolRequest(parallel_tool_calls=parallel_tool_calls)
    if not isinstance(raw_tools, list):
        raise _fail("'tools' must be a list of function tools.", "tools")
    if not raw_tools:
        raise _fail("'tools' must not be an empty array. Provide at least one tool or omit the field.", "tools")
    tools = [_tool(value, index) for index, value in enumerate(raw_tools)]
    names = [t["function"]["name"] for t in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise _fail(f"'tools[{index}].function.name': {name!r} is declared twice.", f"tools[{index}].function.name")
    if choice is None:
        choice = "auto"  # vLLM's and OpenAI's default when tools are given
    if choice == "none":
        return ToolRequest(tools=tools, mode=ToolMode.NONE, parallel_tool_calls=parallel_tool_calls)
    if choice == "auto":
        if not tool_call_parser:
            raise _fail(
                "tool_choice 'auto' needs a tool-call parser; this deployment declares none "
                "(set ENGINE_TOOL_CALL_PARSER). Use tool_choice 'required' or a named function instead.",
                "tool_choice",
            )
        if tool_call_parser not in SUPPORTED_TOOL_CALL_PARSERS:
            raise _fail(
                f"tool_choice 'auto' needs a tool-call parser this server implements; the deployment declares "
                f"{tool_call_parser!r} and this server implements {sorted(SUPPORTED_TOOL_CALL_PARSERS) or 'none yet'}. "
                "Use tool_choice 'required' or a named function instead.",
                "tool_choice",
            )
        return ToolRequest(tools=tools, mode=ToolMode.AUTO, parallel_tool_calls=parallel_tool_calls)
    if choice == "required":
        schema = required_tools_schema(tools, parallel_tool_calls=parallel_tool_calls)
        check_compiles({"json": schema}, param="tools")
        return ToolRequest(
            tools=tools, mode=ToolMode.REQUIRED, parallel_tool_calls=parallel_tool_calls, structured={"json": schema}
        )
    if isinstance(choice, dict):
        name = _named_choice(choice, names)
        schema = named_tool_schema(tools[names.index(name)])
        return ToolRequest(
            tools=tools,
            mode=ToolMode.NAMED,
            function_name=name,
            parallel_tool_calls=parallel_tool_calls,
            structured={"json": schema},
        )
    raise _fail(
        f"Invalid value for 'tool_choice': {echo(choice)}. Only a named function, 'none', 'auto' or 'required' are "
        "supported.",
        "tool_choice",
    )


def request_structured_outputs(body: dict[str, Any], tools: ToolRequest) -> dict[str, Any] | None:
    """The run's ``SamplingSpec.structured_outputs``: the tools' constraint when a tool is forced, else the body's
    ``response_format`` / ``structured_outputs`` (:func:`generation.structured_outputs.structured_from_request`).

    As vLLM: a forced tool overrides ``response_format`` (which is still checked for shape); ``structured_outputs``
    with ``json``/``regex``/``choice`` and a named ``tool_choice`` is a 400 ("not both").
    """
    extension = body.get("structured_outputs")
    if (
        tools.mode is ToolMode.NAMED
        and isinstance(extension, dict)
        and any(extension.get(k) is not None for k in ("json", "regex", "choice"))
    ):
        raise _fail(
            "You can only either use constraints for structured outputs or tools, not both.", "structured_outputs"
        )
    own = structured_from_request(body.get("response_format"), extension, check=tools.structured is None)
    return tools.structured if tools.structured is not None else own


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


# Streaming


@dataclass
class _Span:
    """One element of a (possibly partial) "required" array: vLLM's ``_RequiredToolCallSpan``. Offsets are
    prefix-stable: scanning a prefix of the text gives the same spans truncated to it."""

    name: str | None = None
    name_end: int | None = None
    args_start: int | None = None
    args_end: int | None = None

    def ready_at(self, length: int) -> bool:
        return (
            self.name is not None
            and self.name_end is not None
            and self.name_end <= length
            and self.args_start is not None
            and self.args_start < length
        )

    @property
    def ready(self) -> bool:
        return self.name is not None and self.args_start is not None


_EXPECT_KEY, _EXPECT_COLON, _EXPECT_VALUE, _IN_STRING, _IN_CONTAINER, _IN_SCALAR, _AFTER_VALUE = range(7)


def _scan_required(text: str) -> list[_Span]:
    """vLLM's ``_scan_required_tool_calls``: where each element's name and ``parameters`` value sit in ``text``
    (string- and nesting-aware, only the element level interpreted; text after the array's ``]`` ignored)."""
    spans: list[_Span] = []
    depth = 0
    in_string = escaped = False
    string_start = value_start = 0
    cur: _Span | None = None
    expect = _EXPECT_KEY
    key: str | None = None

    def end_value(pos: int) -> None:
        nonlocal expect
        if cur is None:
            return
        if key == "parameters":
            cur.args_end = pos
        elif key == "name" and expect == _IN_STRING:
            try:
                cur.name = json.loads(text[value_start:pos])
                cur.name_end = pos
            except ValueError:
                cur.name = None
        expect = _AFTER_VALUE

    def start_value(pos: int, state: int) -> None:
        nonlocal expect, value_start
        if cur is None:
            return
        value_start = pos
        if key == "parameters":
            cur.args_start = pos
        expect = state

    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 2 and cur is not None:
                    if expect == _EXPECT_KEY:
                        key = text[string_start + 1 : i]
                        expect = _EXPECT_COLON
                    elif expect == _IN_STRING:
                        end_value(i + 1)
            continue
        if ch == '"':
            in_string = True
            string_start = i
            if depth == 2 and cur is not None and expect == _EXPECT_VALUE:
                start_value(i, _IN_STRING)
            continue
        if ch in "{[":
            if depth == 0 and ch != "[":
                return spans
            if depth == 1:
                if ch != "{":
                    return spans
                cur = _Span()
                spans.append(cur)
                expect, key = _EXPECT_KEY, None
            elif depth == 2 and cur is not None and expect == _EXPECT_VALUE:
                start_value(i, _IN_CONTAINER)
            depth += 1
            continue
        if ch in "}]":
            if depth == 2 and cur is not None and expect == _IN_SCALAR:
                end_value(i)
            depth -= 1
            if depth == 2 and cur is not None and expect == _IN_CONTAINER:
                end_value(i + 1)
            elif depth == 1:
                cur = None
            elif depth <= 0:
                return spans
            continue
        if depth != 2 or cur is None:
            continue
        if ch == ":":
            if expect == _EXPECT_COLON:
                expect = _EXPECT_VALUE
        elif ch == ",":
            if expect == _IN_SCALAR:
                end_value(i)
            expect, key = _EXPECT_KEY, None
        elif ch.isspace():
            if expect == _IN_SCALAR:
                end_value(i)
        elif expect == _EXPECT_VALUE:
            start_value(i, _IN_SCALAR)
    return spans


class ToolCallStream:
    """Turns the successive text pieces of a forced-tool answer into OpenAI ``delta.tool_calls`` lists.

    ``feed(piece)`` returns the list for the chunk that carries ``piece`` (empty: send nothing for it). Use one per
    streamed choice; :attr:`called` says whether any call was announced (for :func:`finish_reason`).
    Only named and "required" modes stream calls; in other modes every piece is plain content (an empty list).
    """

    def __init__(self, mode: ToolMode, tool_name: str | None = None, *, parallel_tool_calls: bool = True) -> None:
        if mode is ToolMode.NAMED and tool_name is None:
            raise ValueError("a named tool choice needs its tool_name")
        self.mode = mode
        self.tool_name = tool_name
        self.parallel_tool_calls = parallel_tool_calls
        self.text = ""
        self.ids: list[str] = []
        """The ids announced, by index."""

    @property
    def called(self) -> bool:
        return bool(self.ids)

    def feed(self, piece: str) -> list[dict[str, Any]]:
        previous, self.text = self.text, self.text + piece
        if not piece:
            return []
        if self.mode is ToolMode.NAMED:
            return [self._named(piece)]
        if self.mode is ToolMode.REQUIRED:
            deltas = self._required(previous)
            return deltas if self.parallel_tool_calls else [d for d in deltas if d["index"] == 0]
        return []

    def _named(self, piece: str) -> dict[str, Any]:
        if self.ids:
            return {"index": 0, "function": {"arguments": piece}}
        self.ids.append(new_tool_call_id())
        return {
            "index": 0,
            "id": self.ids[0],
            "type": "function",
            "function": {"name": self.tool_name, "arguments": piece},
        }

    def _required(self, previous: str) -> list[dict[str, Any]]:
        """vLLM's ``extract_required_tool_call_streaming``: what the current text reveals beyond ``previous``."""
        current = self.text
        sent = len(previous)
        deltas: list[dict[str, Any]] = []
        for index, span in enumerate(_scan_required(current)):
            if not span.ready or span.args_start is None:
                break  # elements come in order: nothing later can be ready
            end = span.args_end if span.args_end is not None else len(current)
            if span.ready_at(sent):
                new = current[min(end, sent) : end]
                if new:
                    deltas.append({"index": index, "function": {"arguments": new}})
                continue
            self.ids.append(new_tool_call_id())
            deltas.append(
                {
                    "index": index,
                    "id": self.ids[index],
                    "type": "function",
                    "function": {"name": span.name, "arguments": current[span.args_start : end]},
                }
            )
        return deltas


# History


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
    problem = text_problem(text)
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


def tool_turn(messages: Sequence[Any], index: int) -> tuple[str, str] | None:
    """The stored ``(role, content)`` of ``messages[index]`` when it is an assistant message with ``tool_calls`` or a
    ``tool`` message; None for any other message (the caller parses those as before).

    Assistant: ``content`` may be null; the calls are stored as the "required" array text
    ``[{"name": ..., "parameters": {...}}]`` after the content (if any), so the history reads the way this server
    has the model write calls. Tool: ``tool_call_id`` must answer a call of the assistant message just before
    (only other ``tool`` messages between), ``content`` is the result; stored with role ``tool``.
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
