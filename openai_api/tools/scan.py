"""Where the calls sit in a (possibly partial) "required" array ``[{"name": ..., "parameters": {...}}, ...]``: the
scanner both the stream (:mod:`openai_api.tools.streaming`) and a finished answer (:mod:`openai_api.tools.calls`)
read calls with, so an answer cut short by ``max_tokens`` gives the same truncated calls either way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class CallSpan:
    """One element of a (possibly partial) "required" array: vLLM's ``_RequiredToolCallSpan``. Offsets are
    prefix-stable: scanning a prefix of the text gives the same spans truncated to it."""

    name: str | None = None
    name_start: int | None = None
    """Where the name's string value starts (its opening quote), once it has started."""
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


def scan_calls(text: str) -> list[CallSpan]:
    """vLLM's ``_scan_required_tool_calls``: where each element's name and ``parameters`` value sit in ``text``
    (string- and nesting-aware, only the element level interpreted; text after the array's ``]`` ignored)."""
    spans: list[CallSpan] = []
    depth = 0
    in_string = escaped = False
    string_start = value_start = 0
    cur: CallSpan | None = None
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
        elif key == "name" and state == _IN_STRING:
            cur.name_start = pos
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
                cur = CallSpan()
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


def span_name(text: str, span: CallSpan, names: Sequence[str]) -> str | None:
    """The span's function name: the one written, or, when the text ends inside the name, the only declared name
    that begins with what was written (None: not known yet)."""
    if span.name is not None:
        return span.name
    if span.name_start is None or span.name_end is not None:
        return None
    written = text[span.name_start + 1 :]
    matching = [n for n in names if n.startswith(written)]
    return matching[0] if len(matching) == 1 else None


def partial_calls(text: str, names: Sequence[str]) -> list[tuple[str, str]]:
    """``(name, arguments text)`` of each call of an array that may be cut short: the arguments as written so far
    (empty when they had not started), in order, up to the first call whose name is not known
    (:func:`span_name`)."""
    calls: list[tuple[str, str]] = []
    for span in scan_calls(text):
        name = span_name(text, span, names)
        if name is None:
            break
        if span.args_start is None:
            calls.append((name, ""))
            break
        calls.append((name, text[span.args_start : span.args_end if span.args_end is not None else len(text)]))
    return calls
