"""Structured outputs: a request's ``response_format`` / ``structured_outputs`` as one ``SamplingSpec`` field, and
the check that the engine's grammar backend can compile it.

What vLLM 0.32's OpenAI server does, and what this module mirrors (``ChatCompletionRequest`` validators and
``structured_outputs_from_response_format`` in ``vllm/entrypoints/...``;
``SamplingParams._validate_structured_outputs``; ``vllm/v1/structured_output/backend_guidance.py``):

- ``response_format``: ``{"type": "text"}`` is no constraint; ``{"type": "json_object"}`` is ``json_object: true``;
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}`` is ``json: <schema>``
  (a missing ``json_schema`` or ``schema`` is a 400, as in vLLM).
- ``structured_outputs`` (vLLM's extension): exactly one of ``json`` (a schema, or its JSON text), ``regex``,
  ``choice`` (a non-empty list of strings), ``grammar`` (Lark, or GBNF that llguidance converts), ``json_object``.
  vLLM's other options (``disable_any_whitespace``, ``whitespace_pattern``, ``structural_tag``...) are refused by
  name: ``SamplingSpec`` does not carry them and silently dropping them would change the answer.
- Both at once: vLLM applies ``response_format`` over ``structured_outputs`` (``dataclasses.replace``), so the same
  kind (``json`` and a ``json_schema`` format) means the ``response_format`` schema wins, and two different kinds
  are a 400 ("only one kind of structured outputs constraint").
- ``strict``: vLLM reads it and ignores it, because the output is *always* constrained to the schema: the grammar
  backend masks every token that would leave it. So ``strict: false`` does not loosen anything and
  ``strict: true`` does not impose OpenAI's strict-mode subset (every property required, no additional properties);
  this module checks only that it is a boolean (or null).

Compiling (:func:`check_compiles`) is what the engine does when a request arrives with the ``guidance`` backend:
``llguidance.LLMatcher.grammar_from_json_schema`` / ``llguidance.grammar_from`` then ``validate_grammar`` with no
tokenizer, after vLLM's own pre-checks (empty choice, empty grammar, nesting deeper than 64, a NUL in a regex).
An error is a 400 with llguidance's own reason instead of a run that fails in the worker. llguidance imports in
~0.2 s without torch; vLLM itself is never imported here (it pulls in torch).

Every string of the constraint also has to be storable (``Run.sampling`` is Postgres ``jsonb``: no NUL, no lone
surrogate): checked with ``core.http.text`` so such a request is a 400 naming the parameter, not a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any

import llguidance

from core.http.text import echo, text_problem
from generation.sampling import STRUCTURED_OUTPUT_KINDS, SamplingError

MAX_JSON_NESTING = 64
"""vLLM's ``MAX_STRUCTURED_OUTPUT_JSON_NESTING``: objects and arrays of a schema may nest at most this deep."""
SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""OpenAI's rule for ``response_format.json_schema.name`` and function names."""
VLLM_ONLY_OPTIONS = (
    "disable_any_whitespace",
    "disable_additional_properties",
    "whitespace_pattern",
    "structural_tag",
)
"""``StructuredOutputsParams`` fields this server refuses by name (not carried by ``SamplingSpec``)."""


def _fail(message: str, param: str) -> SamplingError:
    return SamplingError(message, param=param)


def check_storable(value: Any, param: str) -> None:
    """Raises when a string anywhere in ``value`` (keys included) cannot be stored in Postgres ``jsonb``."""
    stack: list[tuple[Any, str]] = [(value, param)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise _fail(f"'{where}' {problem}", where)
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(str(key))
                if problem is not None:
                    raise _fail(f"A key of '{where}' {problem}", where)
                stack.append((child, where))
        elif isinstance(item, list):
            stack.extend((child, where) for child in item)


def _schema(value: Any, param: str) -> dict[str, Any]:
    """A JSON schema as an object: vLLM accepts the schema or its JSON text (``structured_outputs.json``)."""
    if isinstance(value, str):
        if not value.strip():
            raise _fail(f"'{param}' cannot be an empty string.", param)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise _fail(f"'{param}' is not valid JSON: {exc}.", param) from None
    if isinstance(value, bool) or not isinstance(value, dict):
        raise _fail(f"'{param}' must be a JSON schema (an object); got {type(value).__name__}.", param)
    check_storable(value, param)
    return value


def _from_response_format(response_format: Any) -> tuple[dict[str, Any] | None, str]:
    """The constraint a ``response_format`` asks for and the parameter that holds it."""
    param = "response_format"
    if not isinstance(response_format, dict):
        raise _fail(f'\'{param}\' must be an object such as {{"type": "json_object"}}.', param)
    kind = response_format.get("type")
    known = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}
    if not isinstance(kind, str) or kind not in known:  # a list or an object is no key either
        raise _fail(
            f"'{param}.type' must be one of 'text', 'json_object', 'json_schema'; got {echo(kind)}.", f"{param}.type"
        )
    unknown = sorted(set(response_format) - known[kind])
    if unknown:
        raise _fail(f"'{param}' of type '{kind}' does not take {unknown}.", f"{param}.{unknown[0]}")
    if kind == "text":
        return None, param
    if kind == "json_object":
        return {"json_object": True}, param
    spec = response_format.get("json_schema")
    param = f"{param}.json_schema"
    if spec is None:
        raise _fail(f"When response_format type is 'json_schema', the '{param}' field must be provided.", param)
    if not isinstance(spec, dict):
        raise _fail(f"'{param}' must be an object {{name, schema, strict?, description?}}.", param)
    unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if unknown:
        raise _fail(f"'{param}' does not take {unknown}.", f"{param}.{unknown[0]}")
    name = spec.get("name")
    if not isinstance(name, str) or not SCHEMA_NAME.match(name):
        raise _fail(
            f"'{param}.name' must be 1 to 64 letters, digits, underscores or dashes; got {echo(name)}.",
            f"{param}.name",
        )
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise _fail(f"'{param}.strict' must be true or false.", f"{param}.strict")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise _fail(f"'{param}.description' must be a string.", f"{param}.description")
    if "schema" not in spec or spec["schema"] is None:
        raise _fail(f"'{param}.schema' is required: the JSON schema the answer must follow.", f"{param}.schema")
    if isinstance(spec["schema"], str):  # OpenAI takes an object here; only vLLM's own extension takes text
        raise _fail(f"'{param}.schema' must be a JSON schema object.", f"{param}.schema")
    return {"json": _schema(spec["schema"], f"{param}.schema")}, f"{param}.schema"


def _from_structured_outputs(structured_outputs: Any) -> tuple[dict[str, Any], str]:
    param = "structured_outputs"
    if not isinstance(structured_outputs, dict):
        raise _fail(f"'{param}' must be an object with one of {list(STRUCTURED_OUTPUT_KINDS)}.", param)
    for option in VLLM_ONLY_OPTIONS:
        if structured_outputs.get(option) not in (None, False):
            raise _fail(f"'{param}.{option}' is not supported by this server.", f"{param}.{option}")
    unknown = sorted(set(structured_outputs) - set(STRUCTURED_OUTPUT_KINDS) - set(VLLM_ONLY_OPTIONS))
    if unknown:
        raise _fail(
            f"'{param}' does not take {unknown}; use one of {list(STRUCTURED_OUTPUT_KINDS)}.", f"{param}.{unknown[0]}"
        )
    kinds = [k for k in STRUCTURED_OUTPUT_KINDS if structured_outputs.get(k) is not None]
    if len(kinds) != 1:
        raise _fail(
            f"'{param}' must set exactly one kind of constraint ({', '.join(STRUCTURED_OUTPUT_KINDS)}); "
            f"got {kinds or 'none'}.",
            param,
        )
    kind = kinds[0]
    value = structured_outputs[kind]
    where = f"{param}.{kind}"
    if kind == "json":
        return {"json": _schema(value, where)}, where
    if kind == "json_object":
        if value is not True:
            raise _fail(f"'{where}' must be true if set; omit structured_outputs to disable structured outputs.", where)
        return {"json_object": True}, where
    if kind == "choice":
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise _fail(f"'{where}' must be a list of strings.", where)
        if not value:
            raise _fail(f"'{where}' cannot be an empty list.", where)
        check_storable(value, where)
        return {"choice": list(value)}, where
    if not isinstance(value, str):
        raise _fail(f"'{where}' must be a string.", where)
    check_storable(value, where)
    return {kind: value}, where


def structured_from_request(
    response_format: Any, structured_outputs: Any, *, check: bool = True
) -> dict[str, Any] | None:
    """The request's ``SamplingSpec.structured_outputs`` (one of ``json``, ``json_object``, ``regex``, ``choice``,
    ``grammar``), or None when it asks for no constraint.

    ``response_format`` and ``structured_outputs`` are the body's values as sent (None when absent).
    With ``check`` (the default) the constraint is also compiled (:func:`check_compiles`) and a failure names the
    parameter that held it (``response_format.json_schema.schema``, ``structured_outputs.regex``...).
    Raises :class:`generation.sampling.SamplingError` with ``param`` set for anything vLLM would refuse.
    """
    from_format = _from_response_format(response_format) if response_format is not None else (None, "")
    from_extension = _from_structured_outputs(structured_outputs) if structured_outputs is not None else (None, "")
    result, param = from_format if from_format[0] is not None else from_extension
    if from_format[0] is not None and from_extension[0] is not None:
        # vLLM: replace(structured_outputs, **response_format_overrides); the same kind is overridden, two kinds
        # fail StructuredOutputsParams.__post_init__.
        if set(from_format[0]) != set(from_extension[0]):
            raise _fail(
                "You can only use one kind of structured outputs constraint: 'response_format' asks for "
                f"{next(iter(from_format[0]))} and 'structured_outputs' for {next(iter(from_extension[0]))}.",
                "structured_outputs",
            )
    if result is not None and check:
        check_compiles(result, param=param)
    return result


def _exceeds_nesting(value: Any, limit: int) -> bool:
    """vLLM's ``_exceeds_json_nesting``: breadth-first, so a deep schema is never walked recursively."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def _guidance_grammar(structured: dict[str, Any]) -> str:
    """vLLM's ``serialize_guidance_grammar`` for the kinds ``SamplingSpec`` carries (whitespace flexible, additional
    properties as the schema says: vLLM's defaults)."""
    if "json" in structured:
        spec = structured["json"]
        text = spec if isinstance(spec, str) else json.dumps(spec)
        return llguidance.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": True})
    if structured.get("json_object"):
        return llguidance.LLMatcher.grammar_from_json_schema(
            '{"type": "object"}', defaults={"whitespace_flexible": True}
        )
    if "regex" in structured:
        return llguidance.grammar_from("regex", structured["regex"])
    if "choice" in structured:
        return llguidance.grammar_from("choice", json.dumps(structured["choice"]))
    if "grammar" in structured:
        return llguidance.grammar_from("grammar", structured["grammar"])
    raise ValueError(f"no structured output kind in {sorted(structured)}")


def check_compiles(structured: dict[str, Any], *, param: str | None = None) -> None:
    """Raises :class:`SamplingError` when the engine (vLLM, ``guidance`` backend) would refuse ``structured``.

    ``structured`` is a normalized ``SamplingSpec.structured_outputs`` dict; ``param`` names where it came from
    (default ``structured_outputs.<kind>``). The message carries llguidance's own reason.
    """
    kinds = [k for k in STRUCTURED_OUTPUT_KINDS if structured.get(k) not in (None, False)]
    if len(kinds) != 1:
        raise ValueError(f"a structured_outputs dict holds exactly one kind; got {kinds}")
    kind = kinds[0]
    param = param or f"structured_outputs.{kind}"
    value = structured[kind]
    # SamplingParams._validate_structured_outputs: checks made before any backend sees the constraint.
    if kind == "choice" and not value:
        raise _fail(f"'{param}' cannot be an empty list.", param)
    if kind == "grammar" and not value.strip():
        raise _fail(f"'{param}' cannot be an empty string.", param)
    if kind == "json" and isinstance(value, str) and not value.strip():
        raise _fail(f"'{param}' cannot be an empty string.", param)
    if kind == "regex" and "\x00" in value:
        raise _fail(f"'{param}' must not contain a NUL character ('\\x00').", param)
    if kind == "json" and _exceeds_nesting(value, MAX_JSON_NESTING):
        raise _fail(
            f"The JSON schema in '{param}' is nested too deeply: objects and arrays may nest at most "
            f"{MAX_JSON_NESTING} levels.",
            param,
        )
    # backend_guidance.validate_guidance_grammar
    try:
        grammar = _guidance_grammar(structured)
    except (ValueError, KeyError, TypeError) as exc:
        raise _fail(f"Invalid grammar specification in '{param}': {exc}", param) from None
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    if error:
        raise _fail(f"Grammar error in '{param}': {error.strip()}", param)
