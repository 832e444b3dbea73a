"""A response streamed as OpenAI's Responses events, read from the run's Redis stream (``openai_api.streaming``).

``response.created``, ``response.in_progress``; for a message ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; for function calls (a forced tool, or an "auto"
answer that starts a call) one ``response.output_item.added`` per call, ``response.function_call_arguments.delta``...,
``response.function_call_arguments.done`` and ``response.output_item.done``; then ``response.completed`` (or
``response.incomplete`` when ``max_output_tokens`` cut it, ``error`` then ``response.failed`` when the run failed).
Every event has its ``sequence_number``. The final events carry the answer as stored in Postgres.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from openai_api.responses import formats
from openai_api.responses.models import ResponseRecord
from openai_api.streaming import KEEPALIVE, Completion, follow_run
from openai_api.tools.grammar import starts_a_call
from openai_api.tools.parsing import ToolMode
from openai_api.tools.streaming import ToolCallStream

Reload = Callable[[], Awaitable[ResponseRecord]]


class _Events:
    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


class _Message:
    """The message item as it streams: opened at its first text."""

    def __init__(self, record: ResponseRecord, event: _Events) -> None:
        self.record, self.event, self.opened = record, event, False

    def open(self) -> list[bytes]:
        if self.opened:
            return []
        self.opened = True
        item_id = formats.message_id(self.record)
        return [
            self.event(
                "response.output_item.added",
                output_index=0,
                item=formats.message_item(self.record, None, status="in_progress"),
            ),
            self.event(
                "response.content_part.added",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part=formats.text_part(""),
            ),
        ]

    def delta(self, text: str) -> list[bytes]:
        opening = self.open()  # first: the events' sequence numbers follow their order
        item_id = formats.message_id(self.record)
        delta = self.event(
            "response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=text, logprobs=[]
        )
        return [*opening, delta]

    def done(self, item: dict[str, Any]) -> list[bytes]:
        text = item["content"][0]["text"] if item["content"] else ""
        item_id = item["id"]
        return [
            *self.open(),
            self.event(
                "response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=text, logprobs=[]
            ),
            self.event(
                "response.content_part.done",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part=formats.text_part(text),
            ),
            self.event("response.output_item.done", output_index=0, item=item),
        ]


class _Calls:
    """The function-call items as they stream (:class:`ToolCallStream` finds them in the forced answer)."""

    def __init__(self, record: ResponseRecord, event: _Events, stream: ToolCallStream) -> None:
        self.record, self.event, self.stream = record, event, stream
        self.opened: list[str] = []

    def feed(self, text: str) -> list[bytes]:
        frames: list[bytes] = []
        for delta in self.stream.feed(text):
            index = delta["index"]
            function = delta.get("function", {})
            if index >= len(self.opened):
                name = function.get("name") or ""
                self.opened.append(name)
                call = formats.Call(name=name, arguments="")
                frames.append(
                    self.event(
                        "response.output_item.added",
                        output_index=index,
                        item=formats.call_item(self.record, index, call, status="in_progress"),
                    )
                )
            arguments = function.get("arguments") or ""
            if arguments:
                frames.append(
                    self.event(
                        "response.function_call_arguments.delta",
                        item_id=formats.call_item_id(self.record, index),
                        output_index=index,
                        delta=arguments,
                    )
                )
        return frames

    def done(self, index: int, item: dict[str, Any]) -> list[bytes]:
        frames: list[bytes] = []
        if index >= len(self.opened):
            self.opened.append(item["name"])
            added = {**item, "arguments": "", "status": "in_progress"}
            frames.append(self.event("response.output_item.added", output_index=index, item=added))
        frames.append(
            self.event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        )
        frames.append(self.event("response.output_item.done", output_index=index, item=item))
        return frames


def call_stream(record: ResponseRecord) -> ToolCallStream | None:
    """What finds the function calls of the answer as it streams, in the call form the request was parsed with
    (``formats.call_format``); None when the tool choice allows no call."""
    mode = formats.tool_mode(record)
    if mode not in (ToolMode.NAMED, ToolMode.REQUIRED, ToolMode.AUTO):
        return None
    return ToolCallStream(
        mode,
        record.request.get("function_name"),
        parallel_tool_calls=bool(record.request.get("parallel_tool_calls", True)),
        names=formats.tool_names(record),
        call_format=formats.call_format(record),
    )


async def response_events(record: ResponseRecord, *, reload: Reload) -> AsyncIterator[bytes]:
    """The response's SSE body; ``reload`` reads the record again (after the run's end) from Postgres."""
    run = record.run
    event = _Events()
    started = formats.response_object(record, run, status="in_progress")
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    mode = formats.tool_mode(record)
    stream = call_stream(record)
    calls = _Calls(record, event, stream) if stream is not None else None
    message = _Message(record, event)
    completion = Completion()
    async for piece in follow_run(run, completion):
        if piece is None:
            yield KEEPALIVE
            continue
        if not piece.text:  # tokens without text: the Responses API streams text deltas only
            continue
        if calls is not None and mode is ToolMode.AUTO and not calls.stream.text and piece.text:
            if not starts_a_call(piece.text, formats.call_format(record)):
                calls = None  # "auto" chose text: the first character decides (openai_api.tools.grammar)
        for frame in calls.feed(piece.text) if calls is not None else message.delta(piece.text):
            yield frame
    final = await reload()
    if completion.error is not None:
        yield event("error", code=completion.error["code"], message=completion.error["message"], param=None)
        body = formats.response_object(final, final.run, status="failed")
        body["error"] = {"code": "server_error", "message": completion.error["message"]}
        yield event("response.failed", response=body)
        return
    body = formats.response_object(final, final.run)
    for index, item in enumerate(body["output"]):
        is_call = item["type"] == "function_call" and calls is not None
        frames = calls.done(index, item) if is_call and calls is not None else message.done(item)
        for frame in frames:
            yield frame
    kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    yield event(kind, response=body)
