"""What a chat completion with tools looks like on the wire, for scripted answers: the ``/v1`` view's own body and
chunk builders (``openai_api.apis``) fed with a scripted stream in place of a run's, read back with the official
``openai`` client's types and its stream accumulator. The engine is left out on purpose (the text is scripted); the
real engine's answers are ``tests/openai_engine/test_tools_auto_engine.py``'s."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from django.utils import timezone
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageFunctionToolCall

from accounts.models import Tier, User
from openai_api import apis
from openai_api.requests import ChatCompletionRequest, parse_chat_completion
from openai_api.streaming import ChoiceEvent, Completion, Piece
from runs.models import Run

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PING = {"type": "function", "function": {"name": "ping"}}
CALL = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'
CUT = '[{"name": "get_weather", "parameters": {"city": "Os'


def request(**body: Any) -> ChatCompletionRequest:
    return parse_chat_completion(
        {"model": "m", "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER, PING], **body}
    )


def run() -> Run:
    tier = Tier(pk=1, name="free")
    return Run(pk=41, created_at=timezone.now(), tier=tier, user=User(tier=tier))


def body(parsed: ChatCompletionRequest, text: str, finish: str) -> ChatCompletion:
    """The non-streamed answer, as ``apis.chat_completions`` builds it from the stored text."""
    message, called = apis._chat_message(parsed.tools, text)
    completion = Completion(text=text, finish_reason=finish, completion_tokens=9)
    finish_reason = apis._chat_finish(parsed.tools, completion, called=called)
    payload = apis.formats.chat_body(
        [run()], "m", messages=[message], completions=[completion], finish_reasons=[finish_reason], logprobs=False
    )
    return ChatCompletion.model_validate(payload)


def streamed(
    parsed: ChatCompletionRequest, pieces: Sequence[str], finish: str, monkeypatch: pytest.MonkeyPatch
) -> list[ChatCompletionChunk]:
    """The streamed answer's chunks, ``pieces`` standing in for the run's deltas."""

    async def scripted(runs: Sequence[Run], completions: Sequence[Completion]) -> AsyncIterator[ChoiceEvent]:
        for piece in pieces:
            completions[0].text += piece
            yield ChoiceEvent(index=0, piece=Piece(text=piece, tokens=1))
        completions[0].finish_reason = finish
        yield ChoiceEvent(index=0, ended=True)

    monkeypatch.setattr(apis, "follow_choices", scripted)

    async def collect() -> list[bytes]:
        return [frame async for frame in apis._chat_chunks([run()], parsed, model="m")]

    frames = asyncio.run(collect())
    assert frames[-1] == apis.DONE
    return [
        ChatCompletionChunk.model_validate(json.loads(frame.decode().removeprefix("data: "))) for frame in frames[:-1]
    ]


def accumulated(chunks: list[ChatCompletionChunk]) -> Any:
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return state.current_completion_snapshot.choices[0]


def test_auto_text_is_an_ordinary_message(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = request()
    answer = body(parsed, "It is sunny in Oslo.", "stop").choices[0]
    assert (answer.message.content, answer.message.tool_calls, answer.finish_reason) == (
        "It is sunny in Oslo.",
        None,
        "stop",
    )
    chunks = streamed(parsed, ["It is ", "sunny in ", "Oslo."], "stop", monkeypatch)
    assert all(not c.choices[0].delta.tool_calls for c in chunks)
    choice = accumulated(chunks)
    assert (choice.message.content, choice.finish_reason) == ("It is sunny in Oslo.", "stop")


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_call_is_tool_calls_with_content_null(choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = request(tool_choice=choice)
    answer = body(parsed, CALL, "stop").choices[0]
    assert answer.message.content is None and answer.finish_reason == "tool_calls"
    (call,) = answer.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.id.startswith("call_") and call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Oslo"})
    chunks = streamed(parsed, [CALL[:5], CALL[5:30], CALL[30:]], "stop", monkeypatch)
    assert all(c.choices[0].delta.content in (None, "") for c in chunks)
    snapshot = accumulated(chunks)
    assert snapshot.finish_reason == "tool_calls" and not snapshot.message.content
    (streamed_call,) = snapshot.message.tool_calls
    assert streamed_call.function.name == "get_weather"
    assert json.loads(streamed_call.function.arguments) == {"city": "Oslo"}


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_call_cut_short_is_a_truncated_call_with_finish_length(choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = request(tool_choice=choice)
    answer = body(parsed, CUT, "length").choices[0]
    assert answer.message.content is None and answer.finish_reason == "length"
    (call,) = answer.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Os')
    snapshot = accumulated(streamed(parsed, [CUT[:20], CUT[20:]], "length", monkeypatch))
    assert snapshot.finish_reason == "length" and not snapshot.message.content
    assert [(c.function.name, c.function.arguments) for c in snapshot.message.tool_calls] == [
        ("get_weather", '{"city": "Os')
    ]
    # cut inside the name: the only tool it can be is announced at the end, with no arguments yet
    early = '[{"name": "get_w'
    snapshot = accumulated(streamed(parsed, [early], "length", monkeypatch))
    assert [(c.function.name, c.function.arguments) for c in snapshot.message.tool_calls] == [("get_weather", "")]


def test_without_parallel_calls_only_one_call_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = request(parallel_tool_calls=False)
    two = '[{"name": "ping", "parameters": {}}, {"name": "ping", "parameters": {}}]'
    assert len(body(parsed, two, "stop").choices[0].message.tool_calls or []) == 1
    assert len(accumulated(streamed(parsed, [two], "stop", monkeypatch)).message.tool_calls) == 1
