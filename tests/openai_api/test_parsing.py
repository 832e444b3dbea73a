"""Request parsing and the stream follower of the OpenAI-compatible API (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest
from django.test import RequestFactory
from pytest_django.fixtures import Settings

from openai_api.errors import OpenAIRequestError
from openai_api.requests import parse_chat_completion, read_body
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


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b\x00c"}], "messages[1].content"),
        ([{"role": "user", "content": "\ud800"}], "messages[0].content"),
        ([{"role": "system", "content": "x\udfffy"}, {"role": "user", "content": "hi"}], "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": "\x00"}]}],
            "messages[0].content[1].text",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "\ud83d"},
                {"role": "user", "content": "b"},
            ],
            "messages[1].content",
        ),
    ],
)
def test_text_postgres_cannot_store_is_refused_naming_the_message(messages: list[Any], param: str) -> None:
    """A NUL or a lone surrogate was a 500 (DataError / UnicodeEncodeError when the messages were stored)."""
    with pytest.raises(OpenAIRequestError) as refused:
        parse_chat_completion(body(messages=messages))
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, "invalid_text")
    assert refused.value.message.startswith(f"'{param}' contains a ")


def _post(raw: bytes, **extra: Any) -> HttpRequest:
    return RequestFactory().post("/v1/chat/completions", raw, content_type="application/json", **extra)


def test_an_escaped_surrogate_pair_is_one_character_and_accepted() -> None:
    """JSON writes characters beyond the BMP as a pair of escapes; json.loads joins them, so only lone halves fail."""
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert parse_chat_completion(read_body(_post(raw))).prompt == "\U0001f600"


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"[" * 10_000 + b"]" * 10_000, 400, "json_too_deep"),  # was a RecursionError (500)
        (b'{"messages": ' + b"[" * 65 + b"]" * 65 + b"}", 400, "json_too_deep"),
        (b"{", 400, "invalid_json"),
        (b'{"temperature": NaN}', 400, "invalid_json"),
        (b'{"max_tokens": ' + b"9" * 5000 + b"}", 400, "invalid_json"),
        (b"\xff\xfe{}", 400, "invalid_json"),
    ],
)
def test_bodies_refused_before_parsing(raw: bytes, status: int, code: str) -> None:
    with pytest.raises(OpenAIRequestError) as refused:
        read_body(_post(raw))
    assert (refused.value.status, refused.value.code) == (status, code)


def test_nesting_up_to_the_limit_and_brackets_in_strings_are_fine() -> None:
    assert read_body(_post(b"[" * 64 + b"]" * 64)) == eval("[" * 64 + "]" * 64)  # noqa: S307 - a literal
    assert read_body(_post(b'{"a": "' + b"[" * 10_000 + b'"}')) == {"a": "[" * 10_000}
    assert read_body(_post(b"")) is None


def test_a_body_over_the_limit_is_413(settings: Settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    with pytest.raises(OpenAIRequestError) as refused:
        read_body(_post(b'{"model": "' + b"x" * 2000 + b'"}'))
    assert (refused.value.status, refused.value.code) == (413, "request_too_large")
    assert refused.value.message == "The request body is larger than 1000 bytes; send a smaller one."


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
