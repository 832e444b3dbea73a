"""``/v1/embeddings`` bodies: what is accepted, and the 400 that names the parameter otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.embedding_model import EmbeddingSpec
from openai_api.embedding_params import parse_embeddings
from openai_api.errors import OpenAIRequestError

SPEC = EmbeddingSpec(dimensions=384, max_tokens=256, pooling="mean_tokens", normalize=True)


def parse(**body: Any) -> Any:
    return parse_embeddings({"model": "m", **body}, spec=SPEC, max_inputs=4)


def test_the_four_input_shapes() -> None:
    assert parse(input="a").inputs.texts == ["a"]
    assert parse(input=["a", "b"]).inputs.texts == ["a", "b"]
    one = parse(input=[101, 7592, 102]).inputs
    assert (one.texts, one.token_ids) == ([None], [[101, 7592, 102]])
    mixed = parse(input=[[101, 102], "x"]).inputs
    assert (mixed.texts, mixed.token_ids) == ([None, "x"], [[101, 102], None])


def test_defaults_and_options() -> None:
    parsed = parse(input="a")
    assert (parsed.encoding_format, parsed.truncate_to, parsed.truncation_side, parsed.user) == (
        "float",
        None,
        "right",
        None,
    )
    assert parse(input="a", encoding_format="base64", user="u").encoding_format == "base64"
    assert parse(input="a", truncate_prompt_tokens=-1).truncate_to == 256
    assert parse(input="a", truncate_prompt_tokens=10, truncation_side="left").truncate_to == 10
    assert parse(input="a", dimensions=384).inputs.texts == ["a"]  # the model's own size asks for nothing


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": "a", "temperature": 0}, "temperature", "unknown_parameter"),
        ({}, "input", None),
        ({"input": ""}, "input", None),
        ({"input": []}, "input", None),
        ({"input": ["a", ""]}, "input[1]", None),
        ({"input": ["a", 3.5]}, "input[1]", None),
        ({"input": [[1, 2], []]}, "input[1]", None),
        ({"input": [True, False]}, "input[0]", None),
        ({"input": ["a"] * 5}, "input", None),
        ({"input": {"text": "a"}}, "input", None),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format", None),
        ({"input": "a", "dimensions": 128}, "dimensions", "unsupported_dimensions"),
        ({"input": "a", "dimensions": 0}, "dimensions", None),
        ({"input": "a", "user": 5}, "user", None),
        ({"input": "a", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens", None),
        ({"input": "a", "truncate_prompt_tokens": 257}, "truncate_prompt_tokens", None),
        ({"input": "a", "truncation_side": "middle"}, "truncation_side", None),
    ],
)
def test_refusals_name_the_parameter(body: dict[str, Any], param: str, code: str | None) -> None:
    with pytest.raises(OpenAIRequestError) as refused:
        parse(**body)
    assert refused.value.status == 400
    assert refused.value.param == param
    assert refused.value.code == code
