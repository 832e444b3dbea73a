"""The tool calls of an answer still being generated: :class:`ToolCallStream` turns each streamed text piece into
OpenAI ``delta.tool_calls``, as vLLM streams them.

Named: the first piece carries ``index``, ``id``, ``type``, ``function.name`` and the start of ``arguments``, later
pieces only argument text. "required": the array is scanned as it grows and each call is announced (id, name,
arguments so far) as soon as its name is complete and its ``parameters`` value has started, then only new argument
text follows (several calls may share one delta).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from openai_api.tools.calls import new_tool_call_id
from openai_api.tools.parsing import ToolMode


@dataclass
class _Span:
    """One element of a (possibly partial) "required" array: vLLM's ``_RequiredToolCallSpan``. Offsets are
    prefix-stable: scanning a prefix of the text gives the same spans truncated to it."""

    name: str | None = None
    name_end: int | None = None
    args_start: int | None = None
    args_end: int | None = None

    def ready_at(self, length: int) -> bool:
        return (
            self.name is not None
            and self.name_end is not None
            and self.name_end <= length
            and self.args_start is not None
            and self.args_start < length
        )

    @property
    def ready(self) -> bool:
        return self.name is not None and self.args_start is not None


_EXPECT_KEY, _EXPECT_COLON, _EXPECT_VALUE, _IN_STRING, _IN_CONTAINER, _IN_SCALAR, _AFTER_VALUE = range(7)


def _scan_required(text: str) -> list[_Span]:
    """vLLM's ``_scan_required_tool_calls``: where each element's name and ``parameters`` value sit in ``text``
    (string- and nesting-aware, only the element level interpreted; text after the array's ``]`` ignored)."""
    spans: list[_Span] = []
    depth = 0
    in_string = escaped = False
    string_start = value_start = 0
    cur: _Span | None = None
    expect = _EXPECT_KEY
    key: str | None = None

    def end_value(pos: int) -> None:
        nonlocal expect
        if cur is None:
            return
        if key == "parameters":
            cur.args_end = pos
        elif key == "name" and expect == _IN_STRING:
            try:
                cur.name = json.loads(text[value_start:pos])
                cur.name_end = pos
            except ValueError:
                cur.name = None
        expect = _AFTER_VALUE

    def start_value(pos: int, state: int) -> None:
        nonlocal expect, value_start
        if cur is None:
            return
        value_start = pos
        if key == "parameters":
            cur.args_start = pos
        expect = state

    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 2 and cur is not None:
                    if expect == _EXPECT_KEY:
                        key = text[string_start + 1 : i]
                        expect = _EXPECT_COLON
                    elif expect == _IN_STRING:
                        end_value(i + 1)
            continue
        if ch == '"':
            in_string = True
            string_start = i
            if depth == 2 and cur is not None and expect == _EXPECT_VALUE:
                start_value(i, _IN_STRING)
            continue
        if ch in "{[":
            if depth == 0 and ch != "[":
                return spans
            if depth == 1:
                if ch != "{":
                    return spans
                cur = _Span()
                spans.append(cur)
                expect, key = _EXPECT_KEY, None
            elif depth == 2 and cur is not None and expect == _EXPECT_VALUE:
                start_value(i, _IN_CONTAINER)
            depth += 1
            continue
        if ch in "}]":
            if depth == 2 and cur is not None and expect == _IN_SCALAR:
                end_value(i)
            depth -= 1
            if depth == 2 and cur is not None and expect == _IN_CONTAINER:
                end_value(i + 1)
            elif depth == 1:
                cur = None
            elif depth <= 0:
                return spans
            continue
        if depth != 2 or cur is None:
            continue
        if ch == ":":
            if expect == _EXPECT_COLON:
                expect = _EXPECT_VALUE
        elif ch == ",":
            if expect == _IN_SCALAR:
                end_value(i)
            expect, key = _EXPECT_KEY, None
        elif ch.isspace():
            if expect == _IN_SCALAR:
                end_value(i)
        elif expect == _EXPECT_VALUE:
            start_value(i, _IN_SCALAR)
    return spans


class ToolCallStream:
    """Turns the successive text pieces of a forced-tool answer into OpenAI ``delta.tool_calls`` lists.

    ``feed(piece)`` returns the list for the chunk that carries ``piece`` (empty: send nothing for it). Use one per
    streamed choice; :attr:`called` says whether any call was announced (for
    :func:`openai_api.tools.calls.finish_reason`).
    Only named and "required" modes stream calls; in other modes every piece is plain content (an empty list).
    """

    def __init__(self, mode: ToolMode, tool_name: str | None = None, *, parallel_tool_calls: bool = True) -> None:
        if mode is ToolMode.NAMED and tool_name is None:
            raise ValueError("a named tool choice needs its tool_name")
        self.mode = mode
        self.tool_name = tool_name
        self.parallel_tool_calls = parallel_tool_calls
        self.text = ""
        self.ids: list[str] = []
        """The ids announced, by index."""

    @property
    def called(self) -> bool:
        return bool(self.ids)

    def feed(self, piece: str) -> list[dict[str, Any]]:
        previous, self.text = self.text, self.text + piece
        if not piece:
            return []
        if self.mode is ToolMode.NAMED:
            return [self._named(piece)]
        if self.mode is ToolMode.REQUIRED:
            deltas = self._required(previous)
            return deltas if self.parallel_tool_calls else [d for d in deltas if d["index"] == 0]
        return []

    def _named(self, piece: str) -> dict[str, Any]:
        if self.ids:
            return {"index": 0, "function": {"arguments": piece}}
        self.ids.append(new_tool_call_id())
        return {
            "index": 0,
            "id": self.ids[0],
            "type": "function",
            "function": {"name": self.tool_name, "arguments": piece},
        }

    def _required(self, previous: str) -> list[dict[str, Any]]:
        """vLLM's ``extract_required_tool_call_streaming``: what the current text reveals beyond ``previous``."""
        current = self.text
        sent = len(previous)
        deltas: list[dict[str, Any]] = []
        for index, span in enumerate(_scan_required(current)):
            if not span.ready or span.args_start is None:
                break  # elements come in order: nothing later can be ready
            end = span.args_end if span.args_end is not None else len(current)
            if span.ready_at(sent):
                new = current[min(end, sent) : end]
                if new:
                    deltas.append({"index": index, "function": {"arguments": new}})
                continue
            self.ids.append(new_tool_call_id())
            deltas.append(
                {
                    "index": index,
                    "id": self.ids[index],
                    "type": "function",
                    "function": {"name": span.name, "arguments": current[span.args_start : end]},
                }
            )
        return deltas
