"""The tools of a chat-completion request: ``tools``, ``tool_choice`` and ``parallel_tool_calls`` checked into a
:class:`ToolRequest`, and the structured outputs of its run.

A forced tool (named, or "required") is a structured-outputs constraint on the answer: the function's
``parameters`` schema, or the array-of-calls schema of :func:`required_tools_schema`. What each ``tool_choice``
means, and where this server differs from vLLM on purpose, is in the package docstring (:mod:`openai_api.tools`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.http.text import echo
from generation.sampling import SamplingError
from generation.structured_outputs import SCHEMA_NAME, check_compiles, check_storable, structured_from_request
from openai_api.tools.grammar import auto_tools_grammar
from openai_api.tools.hermes import HERMES, hermes_auto_grammar

SUPPORTED_TOOL_CALL_PARSERS: frozenset[str] = frozenset({HERMES})
"""vLLM tool-call parsers whose call format this server can serve ``tool_choice: "auto"`` in (the model's own,
:mod:`openai_api.tools.hermes`); without one, "auto" is served in the array format of
:mod:`openai_api.tools.grammar` (see the package docstring)."""
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""vLLM's ``_params_or_empty_object``: a tool without parameters still takes a JSON object."""
FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
NAMED_CHOICE_USAGE = 'Correct usage: {"type": "function", "function": {"name": "my_function"}}.'


class ToolMode(StrEnum):
    NONE = "none"
    """No tools, or ``tool_choice: "none"``: nothing constrained, no tool calls parsed."""
    AUTO = "auto"
    """The model decides: text, or the "required" array of calls (:mod:`openai_api.tools.grammar`)."""
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
    """The ``SamplingSpec.structured_outputs`` that constrains the answer (named, required and auto), else None."""
    calls_schema: dict[str, Any] | None = None
    """Auto: the schema of the call branch (:func:`required_tools_schema`), to rebuild the grammar with a
    ``response_format`` object as the other branch."""
    call_format: str = ""
    """Auto: the form of a call, ``""`` (the JSON array of :mod:`openai_api.tools.grammar`) or ``hermes``
    (:mod:`openai_api.tools.hermes`, on a deployment that declares that parser)."""


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


def auto_grammar(
    calls_schema: dict[str, Any],
    call_format: str,
    *,
    parallel_tool_calls: bool,
    answer_schema: dict[str, Any] | None = None,
) -> str:
    """The grammar of an "auto" answer with calls in ``call_format`` (``""``: the JSON array; ``hermes``)."""
    if call_format == HERMES:
        return hermes_auto_grammar(calls_schema, parallel_tool_calls=parallel_tool_calls, answer_schema=answer_schema)
    return auto_tools_grammar(calls_schema, answer_schema)


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
    Raises :class:`SamplingError` with ``param`` for what vLLM (or this server, see the package docstring) refuses.
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
        if tool_call_parser and tool_call_parser not in SUPPORTED_TOOL_CALL_PARSERS:
            raise _fail(
                f"This deployment declares the tool-call parser {tool_call_parser!r} (ENGINE_TOOL_CALL_PARSER), whose "
                f"call format this server does not serve (it serves {sorted(SUPPORTED_TOOL_CALL_PARSERS)}); unset it "
                "to serve tool_choice 'auto' with this server's grammar (the model answers in text or with a JSON "
                "array of calls), or use 'required' or a named function.",
                "tool_choice",
            )
        calls = required_tools_schema(tools, parallel_tool_calls=parallel_tool_calls)
        grammar = auto_grammar(calls, tool_call_parser, parallel_tool_calls=parallel_tool_calls)
        check_compiles({"grammar": grammar}, param="tools")
        return ToolRequest(
            tools=tools,
            mode=ToolMode.AUTO,
            parallel_tool_calls=parallel_tool_calls,
            structured={"grammar": grammar},
            calls_schema=calls,
            call_format=tool_call_parser,
        )
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
    with ``json``/``regex``/``choice`` and a named ``tool_choice`` is a 400 ("not both"). "auto" with a JSON object
    format (``json_object``, or a schema whose ``type`` is ``object``) answers with a call or that object
    (:func:`openai_api.tools.grammar.auto_tools_grammar`); any other constraint with "auto" is a 400.
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
    if tools.mode is ToolMode.AUTO:
        return _auto_structured(body, tools)
    own = structured_from_request(body.get("response_format"), extension, check=tools.structured is None)
    return tools.structured if tools.structured is not None else own


def _auto_structured(body: dict[str, Any], tools: ToolRequest) -> dict[str, Any] | None:
    own = structured_from_request(body.get("response_format"), body.get("structured_outputs"), check=False)
    if own is None or tools.calls_schema is None:
        return tools.structured
    param = "response_format" if body.get("response_format") is not None else "structured_outputs"
    if own.get("json_object"):
        answer: dict[str, Any] = {"type": "object"}
    elif isinstance(own.get("json"), dict) and own["json"].get("type") == "object":
        answer = own["json"]
    else:
        raise _fail(
            "With tool_choice 'auto' the answer is a tool call or text; of the structured outputs only a JSON object "
            "(response_format json_object, or a json_schema whose top-level 'type' is 'object') can take the place "
            "of the text. Use tool_choice 'none' for this constraint alone.",
            param,
        )
    grammar = auto_grammar(
        tools.calls_schema, tools.call_format, parallel_tool_calls=tools.parallel_tool_calls, answer_schema=answer
    )
    check_compiles({"grammar": grammar}, param=param)
    return {"grammar": grammar}
