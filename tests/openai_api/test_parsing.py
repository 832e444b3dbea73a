"""Request parsing and the stream follower of the OpenAI-compatible API (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest

from openai_api.errors import OpenAIRequestError
from openai_api.requests import parse_chat_completion
from openai_api.streaming import _Follower


def body(**overrides: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **overrides}


def test_text_parts_developer_role_and_defaults() -> None:
    parsed = parse_chat_completion(
        body(
            messages=[
                {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
                {"role": "system", "content": "No emoji."},
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": [{"type": "text", "text": "c"}]},
            ],
            max_completion_tokens=7,
            user="someone",
            seed=3,
        )
    )
    assert parsed.system_prompt == "Be brief.\n\nNo emoji."
    assert parsed.history == [("user", "a"), ("assistant", "b")]
    assert parsed.prompt == "c"
    assert parsed.sampling.max_tokens == 7
    assert (parsed.sampling.temperature, parsed.sampling.top_p) == (1.0, 1.0)  # OpenAI's defaults
    assert parsed.stream is False and parsed.include_usage is False
    assert parse_chat_completion(body()).system_prompt is None


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"model": ""}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]}, "messages[1]"),
        ({"messages": [{"role": "user", "content": "   "}]}, "messages[0].content"),
        ({"n": 2}, "n"),
        ({"stop": ["\n"]}, "stop"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_what_cannot_be_honoured_names_its_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIRequestError) as refused:
        parse_chat_completion(body(**overrides))
    assert refused.value.param == param and refused.value.status == 400


def test_a_restart_that_repeats_the_sent_text_continues_seamlessly() -> None:
    follower = _Follower()
    assert follower.add("The sky ") + follower.add("is") == "The sky is"
    follower.reset()
    assert follower.add("The ") == ""
    assert follower.add("sky is blue") == " blue"
    assert follower.add(".") == "."


def test_a_restart_that_diverges_is_an_error() -> None:
    follower = _Follower()
    follower.add("The sky is")
    follower.reset()
    with pytest.raises(ValueError):
        follower.add("A cloud")
