"""Request parsing and the stream follower of the OpenAI-compatible API (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest
from django.test import RequestFactory
from pytest_django.fixtures import Settings

from openai_api.errors import OpenAIRequestError
from openai_api.requests import parse_chat_completion, parse_completion, read_body
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
    # Each system/developer message is kept in its place and role, as the chat template will see it.
    assert parsed.history == [("developer", "Be brief."), ("system", "No emoji."), ("user", "a"), ("assistant", "b")]
    assert parsed.prompt == "c"
    assert parsed.sampling.max_tokens == 7
    assert (parsed.sampling.spec.temperature, parsed.sampling.spec.top_p) == (1.0, 1.0)  # OpenAI's defaults
    assert parsed.sampling.spec.seed == 3 and parsed.sampling.end_user == "someone"
    assert parsed.stream is False and parsed.sampling.stream.include_usage is False
    assert parse_chat_completion(body()).history == []


def test_every_sampling_parameter_reaches_the_spec() -> None:
    parsed = parse_chat_completion(
        body(
            stop="END",
            seed=-5,
            presence_penalty=0.5,
            frequency_penalty=-0.5,
            logit_bias={"42": -100, "7": 2.5},
            logprobs=True,
            top_logprobs=4,
            n=3,
            top_k=20,
            min_p=0.1,
            repetition_penalty=1.2,
            min_tokens=2,
            ignore_eos=True,
            stop_token_ids=[2],
            max_tokens=9,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    spec = parsed.sampling.spec
    assert spec.stop == ("END",) and spec.seed == -5
    assert (spec.presence_penalty, spec.frequency_penalty, spec.repetition_penalty) == (0.5, -0.5, 1.2)
    assert spec.logit_bias == {42: -100.0, 7: 2.5}
    assert spec.logprobs == 4 and parsed.sampling.n == 3
    assert (spec.top_k, spec.min_p, spec.min_tokens, spec.ignore_eos, spec.stop_token_ids) == (20, 0.1, 2, True, (2,))
    assert parsed.sampling.stream.include_usage and parsed.sampling.stream.continuous_usage_stats
    # logprobs without top_logprobs: the sampled token's only
    assert parse_chat_completion(body(logprobs=True)).sampling.spec.logprobs == 0
    assert parse_chat_completion(body()).sampling.spec.logprobs is None


def test_completion_prompts_and_logprobs() -> None:
    parsed = parse_completion({"model": "m", "prompt": ["a", "b"], "logprobs": 2, "n": 2, "max_tokens": 3})
    assert parsed.prompts == ["a", "b"] and parsed.sampling.n == 2 and parsed.sampling.spec.logprobs == 2
    assert parse_completion({"model": "m", "prompt": "x"}).prompts == ["x"]


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["a", ""]}, "prompt[1]"),
        ({"echo": True}, "echo"),
        ({"suffix": "x"}, "suffix"),
        ({"best_of": 3}, "best_of"),
        ({"logprobs": 21}, "logprobs"),
        ({"prompt": ["a"] * 5, "n": 2}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_completion_refusals_name_their_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIRequestError) as refused:
        parse_completion({"model": "m", "prompt": "hi", **overrides})
    assert refused.value.param == param and refused.value.status == 400


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"model": ""}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": "   "}]}, "messages[0].content"),
        ({"n": 0}, "n"),
        ({"n": 9}, "n"),
        ({"stop": [""]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"stop": ["s"] * 17}, "stop"),
        ({"seed": 2**64}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": "x"}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"1": 101}}, "logit_bias"),
        ({"logit_bias": {"99999999": 1}}, "logit_bias"),
        ({"stop_token_ids": [99999999]}, "stop_token_ids"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"ignore_eos": 1}, "ignore_eos"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": {"x": 1}}, "stream_options.x"),
        ({"user": 5}, "user"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
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
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b\udc00c"}], "messages[1].content"),
        ([{"role": "user", "content": "\ud800"}], "messages[0].content"),
        ([{"role": "system", "content": "x\udfffy"}, {"role": "user", "content": "hi"}], "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": "\ud800"}]}],
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


def test_a_nul_in_a_message_is_kept_as_sent() -> None:
    """vLLM serves a prompt with a NUL (its benchmark's random dataset has some); messages store it losslessly."""
    parts = [{"type": "text", "text": "a\x00b"}]
    parsed = parse_chat_completion(
        body(messages=[{"role": "system", "content": "s\x00"}, {"role": "user", "content": parts}])
    )
    assert (parsed.history, parsed.prompt) == ([("system", "s\x00")], "a\x00b")


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


def _text(follower: _Follower, text: str) -> str:
    return follower.add(text, [])[0]


def test_a_restart_that_repeats_the_sent_text_continues_seamlessly() -> None:
    follower = _Follower()
    assert _text(follower, "The sky ") + _text(follower, "is") == "The sky is"
    follower.reset()
    assert _text(follower, "The ") == ""
    assert _text(follower, "sky is blue") == " blue"
    assert _text(follower, ".") == "."


def test_a_restart_skips_the_log_probabilities_of_the_repeated_tokens() -> None:
    def entries(*tokens: str) -> list[dict[str, Any]]:
        return [{"token": t, "logprob": -1.0, "bytes": list(t.encode()), "top_logprobs": []} for t in tokens]

    follower = _Follower()
    follower.add("The sky", entries("The", " sky"))
    follower.reset()
    assert follower.add("The", entries("The")) == ("", [])
    text, logprobs = follower.add(" sky is", entries(" sky", " is"))
    assert text == " is" and [e["token"] for e in logprobs] == [" is"]


def test_a_restart_that_diverges_is_an_error() -> None:
    follower = _Follower()
    _text(follower, "The sky is")
    follower.reset()
    with pytest.raises(ValueError):
        _text(follower, "A cloud")
