"""Whatever a client posts to ``/v1/responses``, the parser answers a checked request or a 400/413 that names what
to fix (:class:`OpenAIRequestError`), never another exception (Hypothesis, no server needed)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from openai_api.errors import OpenAIRequestError
from openai_api.responses.requests import PreviousOutput, parse_response_create

EXAMPLES = hypothesis_settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", "\x00", "\ud800", "user", "assistant", "call_1"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)


def _loose(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={name: st.one_of(valid, JSON) for name, valid in fields.items()})


PART = _loose({"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal"]), "text": TEXT})
ITEM = st.one_of(
    _loose(
        {
            "type": st.just("message"),
            "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
            "content": st.one_of(TEXT, st.lists(PART, max_size=2)),
        }
    ),
    _loose({"type": st.just("function_call"), "call_id": TEXT, "name": TEXT, "arguments": TEXT}),
    _loose({"type": st.just("function_call_output"), "call_id": TEXT, "output": TEXT}),
    JSON,
)
TOOL = _loose({"type": st.sampled_from(["function", "web_search"]), "name": TEXT, "parameters": JSON})
BODIES = _loose(
    {
        "model": st.just("m"),
        "input": st.one_of(TEXT, st.lists(ITEM, max_size=4)),
        "instructions": TEXT,
        "tools": st.lists(TOOL, max_size=2),
        "tool_choice": st.one_of(st.sampled_from(["none", "required", "auto"]), _loose({"type": TEXT, "name": TEXT})),
        "text": _loose({"format": _loose({"type": st.sampled_from(["text", "json_object", "json_schema"])})}),
        "metadata": st.dictionaries(TEXT, TEXT, max_size=3),
        "max_output_tokens": st.integers(-2, 10**6),
        "reasoning": _loose({"effort": st.none()}),
        "truncation": st.sampled_from(["auto", "disabled"]),
        "store": st.booleans(),
        "stream": st.booleans(),
    }
)


@EXAMPLES
@given(body=st.one_of(BODIES, JSON), continues=st.booleans())
def test_a_body_is_parsed_or_refused_with_a_named_reason(body: Any, continues: bool) -> None:
    previous = PreviousOutput(calls=[("call_1", "f", "{}")]) if continues else None
    try:
        parsed = parse_response_create(body, previous=previous)
    except OpenAIRequestError as exc:
        assert exc.status in (400, 413) and exc.message
        assert "messages[" not in exc.message and "max_completion_tokens" not in exc.message
        return
    assert parsed.chat.prompt.strip()
