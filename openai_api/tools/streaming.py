"""The tool calls of an answer still being generated: :class:`ToolCallStream` turns each streamed text piece into
OpenAI ``delta.tool_calls``, as vLLM streams them.

Named: the first piece carries ``index``, ``id``, ``type``, ``function.name`` and the start of ``arguments``, later
pieces only argument text. "required": the array is scanned as it grows and each call is announced (id, name,
arguments so far) as soon as its name is complete and its ``parameters`` value has started, then only new argument
text follows (several calls may share one delta). "auto": text pieces go out as ``content`` until the answer
shows it is a call (it starts with ``[``: :mod:`openai_api.tools.grammar`), then as "required" does. In the hermes
format (:mod:`openai_api.tools.hermes`, an answer that starts with ``<``) each call goes out whole when its closing
tag arrives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai_api.tools.calls import new_tool_call_id
from openai_api.tools.grammar import starts_a_call
from openai_api.tools.hermes import CALL_CLOSE, HERMES, HermesCall, hermes_calls, hermes_stream_calls
from openai_api.tools.parsing import ToolMode
from openai_api.tools.scan import scan_calls, span_name


class ToolCallStream:
    """Turns the successive text pieces of a tool answer into OpenAI chat-chunk deltas.

    ``delta(piece)`` is the delta of the chunk that carries ``piece``: ``{"tool_calls": [...]}``,
    ``{"content": piece}`` (an "auto" answer that is text, or a mode without calls) or ``{}`` (send nothing for it).
    ``feed(piece)`` is the ``tool_calls`` list alone. Use one per streamed choice; :attr:`called` says whether any call
    was announced (for :func:`openai_api.tools.calls.finish_reason`), and :meth:`finish` announces, at the end of an
    answer cut short, a call whose arguments had not started. ``names`` are the declared tools' names (a call cut
    short inside its name is announced when they leave one possible name).
    """

    def __init__(
        self,
        mode: ToolMode,
        tool_name: str | None = None,
        *,
        parallel_tool_calls: bool = True,
        names: Sequence[str] = (),
        call_format: str = "",
    ) -> None:
        if mode is ToolMode.NAMED and tool_name is None:
            raise ValueError("a named tool choice needs its tool_name")
        self.mode = mode
        self.tool_name = tool_name
        self.parallel_tool_calls = parallel_tool_calls
        self.names = tuple(names)
        self.call_format = call_format
        self.text = ""
        self.ids: list[str] = []
        """The ids announced, by index."""

    @property
    def called(self) -> bool:
        return bool(self.ids)

    @property
    def calls_array(self) -> bool:
        """Whether the text is a "required" array of calls: "required", or an "auto" answer that chose a call."""
        return self.mode is ToolMode.REQUIRED or (
            self.mode is ToolMode.AUTO and starts_a_call(self.text, self.call_format)
        )

    @property
    def hermes(self) -> bool:
        """An "auto" answer in the hermes format (:mod:`openai_api.tools.hermes`)."""
        return self.mode is ToolMode.AUTO and self.call_format == HERMES

    def delta(self, piece: str) -> dict[str, Any]:
        deltas = self.feed(piece)
        if deltas:
            return {"tool_calls": deltas}
        if piece and self.mode is not ToolMode.NAMED and not self.calls_array:
            return {"content": piece}
        return {}

    def feed(self, piece: str) -> list[dict[str, Any]]:
        previous, self.text = self.text, self.text + piece
        if not piece:
            return []
        if self.mode is ToolMode.NAMED:
            return [self._named(piece)]
        if not self.calls_array:
            return []
        if not self.hermes:
            return self._kept(self._required(previous))
        # Calls complete only at a closing tag: read the blocks again only when this piece may have ended one.
        closed = CALL_CLOSE in self.text[max(0, len(previous) - len(CALL_CLOSE) + 1) :]
        return self._kept(self._hermes(hermes_stream_calls(self.text))) if closed else []

    def finish(self) -> list[dict[str, Any]]:
        """The calls of an array cut short that were not announced yet (their name known, their arguments not
        started): each with its id, name and the arguments written so far."""
        if not self.calls_array:
            return []
        if self.hermes:
            return self._kept(self._hermes(hermes_calls(self.text, self.names)))
        deltas: list[dict[str, Any]] = []
        for index, span in enumerate(scan_calls(self.text)):
            if index < len(self.ids):
                continue
            if index > 0 and not self.parallel_tool_calls:
                break
            name = span_name(self.text, span, self.names)
            if name is None:
                break
            self.ids.append(new_tool_call_id())
            start, end = span.args_start, span.args_end if span.args_end is not None else len(self.text)
            arguments = self.text[start:end] if start is not None else ""
            deltas.append(
                {
                    "index": index,
                    "id": self.ids[index],
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
            if start is None:
                break
        return deltas

    def _kept(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``parallel_tool_calls: false``: the first call's deltas only."""
        return deltas if self.parallel_tool_calls else [d for d in deltas if d["index"] == 0]

    def _hermes(self, calls: Sequence[HermesCall]) -> list[dict[str, Any]]:
        """Each call not announced yet, whole (id, name, arguments) in one delta: a hermes call goes out when its
        closing tag arrives (or, cut short, at :meth:`finish`)."""
        deltas: list[dict[str, Any]] = []
        for index in range(len(self.ids), len(calls)):
            self.ids.append(new_tool_call_id())
            call = calls[index]
            deltas.append(
                {
                    "index": index,
                    "id": self.ids[index],
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            )
        return deltas

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
        for index, span in enumerate(scan_calls(current)):
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
