"""``response_format`` / ``structured_outputs`` normalized as vLLM normalizes them, and compiled with llguidance as
the engine's ``guidance`` backend compiles them (no server, no database)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from generation.sampling import SamplingError, SamplingSpec, check_sampling
from generation.structured_outputs import check_compiles, structured_from_request
from tests.generation.grammar import schema_accepts

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


ROOT = Path(__file__).resolve().parents[2]


def json_schema_format(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, **extra}}


def refused(response_format: Any = None, structured_outputs: Any = None) -> SamplingError:
    with pytest.raises(SamplingError) as info:
        structured_from_request(response_format, structured_outputs)
    return info.value


def test_text_format_and_absent_fields_ask_for_nothing() -> None:
    assert structured_from_request(None, None) is None
    assert structured_from_request({"type": "text"}, None) is None


def test_json_object_and_json_schema_formats() -> None:
    assert structured_from_request({"type": "json_object"}, None) == {"json_object": True}
    assert structured_from_request(json_schema_format(SCHEMA, strict=True), None) == {"json": SCHEMA}
    # strict false does not loosen anything: the same constraint (vLLM ignores strict; the output is always masked)
    assert structured_from_request(json_schema_format(SCHEMA, strict=False), None) == {"json": SCHEMA}


def test_the_normalized_value_is_a_valid_sampling_spec_field() -> None:
    for structured in (
        structured_from_request({"type": "json_object"}, None),
        structured_from_request(None, {"regex": "[a-z]+"}),
        structured_from_request(None, {"choice": ["yes", "no"]}),
        structured_from_request(None, {"grammar": 'start: "a" | "b"'}),
    ):
        spec = SamplingSpec(structured_outputs=structured)
        check_sampling(spec, max_tokens=10)
        assert SamplingSpec.from_json(spec.to_json(), temperature=0.7, top_p=1.0) == spec


def test_the_vllm_extension_kinds() -> None:
    assert structured_from_request(None, {"json": SCHEMA}) == {"json": SCHEMA}
    assert structured_from_request(None, {"json": json.dumps(SCHEMA)}) == {"json": SCHEMA}  # its text, as vLLM takes
    assert structured_from_request(None, {"regex": r"\d{3}"}) == {"regex": r"\d{3}"}
    assert structured_from_request(None, {"choice": ["a", "b"]}) == {"choice": ["a", "b"]}
    assert structured_from_request(None, {"grammar": 'root ::= "x"'}) == {"grammar": 'root ::= "x"'}  # GBNF too
    assert structured_from_request(None, {"json_object": True}) == {"json_object": True}


def test_the_compiled_json_schema_constrains_the_text() -> None:
    assert schema_accepts(SCHEMA, '{"city": "Paris"}')
    assert not schema_accepts(SCHEMA, '{"town": "Paris"}')
    assert not schema_accepts(SCHEMA, '{"city": 3}')


@pytest.mark.parametrize(
    ("response_format", "param", "says"),
    [
        ("json", "response_format", "must be an object"),
        ({"type": "yaml"}, "response_format.type", "must be one of"),
        ({"type": ["json_object"]}, "response_format.type", "must be one of"),  # unhashable: was a TypeError
        ({"type": {"json": 1}}, "response_format.type", "must be one of"),
        ({"type": "json_schema"}, "response_format.json_schema", "must be provided"),
        ({"type": "json_schema", "json_schema": {"name": "a"}}, "response_format.json_schema.schema", "required"),
        (json_schema_format(SCHEMA, strict="yes"), "response_format.json_schema.strict", "true or false"),
        (json_schema_format(SCHEMA, extra=1), "response_format.json_schema.extra", "does not take"),
        (
            {"type": "json_schema", "json_schema": {"name": "a b", "schema": SCHEMA}},
            "response_format.json_schema.name",
            "letters",
        ),
        (json_schema_format([1, 2]), "response_format.json_schema.schema", "JSON schema"),
        (json_schema_format({"type": "strin"}), "response_format.json_schema.schema", "Invalid type: strin"),
        (json_schema_format({"$ref": "#/$defs/missing"}), "response_format.json_schema.schema", "does not exist"),
        (
            json_schema_format({"type": "object", "required": ["a"], "additionalProperties": False}),
            "response_format.json_schema.schema",
            "Unsatisfiable",
        ),
        (json_schema_format({"type": "string", "pattern": "[z-a]"}), "response_format.json_schema.schema", "range"),
        (json_schema_format({"enum": ["a\x00"]}), "response_format.json_schema.schema", "NUL"),
    ],
)
def test_malformed_or_uncompilable_response_formats_are_refused(response_format: Any, param: str, says: str) -> None:
    error = refused(response_format=response_format)
    assert error.param == param
    assert says in error.message


@pytest.mark.parametrize(
    ("structured_outputs", "param", "says"),
    [
        ({}, "structured_outputs", "exactly one"),
        ({"regex": "a", "choice": ["a"]}, "structured_outputs", "exactly one"),
        ({"regex": "[a-"}, "structured_outputs.regex", "unclosed character class"),
        ({"regex": "a\x00"}, "structured_outputs.regex", "NUL"),
        ({"grammar": "start: foo"}, "structured_outputs.grammar", 'unknown name: "foo"'),
        ({"grammar": "   "}, "structured_outputs.grammar", "empty"),
        ({"choice": []}, "structured_outputs.choice", "empty list"),
        ({"choice": ["a", 1]}, "structured_outputs.choice", "list of strings"),
        ({"json": ""}, "structured_outputs.json", "empty string"),
        ({"json": "{not json"}, "structured_outputs.json", "not valid JSON"),
        ({"json_object": False}, "structured_outputs.json_object", "must be true"),
        ({"json_object": 1}, "structured_outputs.json_object", "must be true"),
        ({"regex": "a", "whitespace_pattern": " "}, "structured_outputs.whitespace_pattern", "not supported"),
        ({"structural_tag": "{}"}, "structured_outputs.structural_tag", "not supported"),
        ({"regexp": "a"}, "structured_outputs.regexp", "does not take"),
    ],
)
def test_malformed_or_uncompilable_extensions_are_refused(structured_outputs: Any, param: str, says: str) -> None:
    error = refused(structured_outputs=structured_outputs)
    assert error.param == param
    assert says in error.message


def test_a_schema_nested_deeper_than_vllm_allows_is_refused_before_compiling() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        deep = {"type": "array", "items": deep}
    error = refused(response_format=json_schema_format(deep))
    assert error.param == "response_format.json_schema.schema"
    assert "nested too deeply" in error.message
    shallow: dict[str, Any] = {"type": "string"}
    for _ in range(10):
        shallow = {"type": "array", "items": shallow}
    assert structured_from_request(json_schema_format(shallow), None) == {"json": shallow}


def test_both_at_once_as_vllm_the_same_kind_is_overridden_two_kinds_are_refused() -> None:
    other = {"type": "integer"}
    assert structured_from_request(json_schema_format(SCHEMA), {"json": other}) == {"json": SCHEMA}
    assert structured_from_request({"type": "json_object"}, {"json_object": True}) == {"json_object": True}
    error = refused(response_format={"type": "json_object"}, structured_outputs={"regex": "a+"})
    assert error.param == "structured_outputs"
    assert "one kind" in error.message
    # a text response_format adds nothing: the extension stands alone
    assert structured_from_request({"type": "text"}, {"regex": "a+"}) == {"regex": "a+"}


def test_check_compiles_names_the_kind_by_default_and_the_given_param_otherwise() -> None:
    with pytest.raises(SamplingError) as info:
        check_compiles({"regex": "("})
    assert info.value.param == "structured_outputs.regex"
    with pytest.raises(SamplingError) as info:
        check_compiles({"json": {"type": "nope"}}, param="tools[0].function.parameters")
    assert info.value.param == "tools[0].function.parameters"
    check_compiles({"json_object": True})
    check_compiles({"choice": ["x"]})


def test_compiling_imports_neither_vllm_nor_torch() -> None:
    """In a fresh interpreter: the web tier checks grammars without loading vLLM or torch."""
    code = (
        "import sys; from generation.structured_outputs import check_compiles, structured_from_request; "
        "check_compiles(structured_from_request({'type': 'json_object'}, None)); "
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
