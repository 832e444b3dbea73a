"""A run's stream as OpenAI ``chat.completion.chunk`` events, or collected into one ``chat.completion``.

Both read the run's Redis Stream through the process's relay (``runs.streaming.follow.iter_run_items``), like
``GET /api/runs/{id}/stream``. Two things differ from our own SSE protocol:

- No resumption: an OpenAI stream cannot be resumed, so a client that goes away cancels its run.
- No ``reset``: OpenAI's stream cannot take text back. When a worker died and generation restarted, the text
  already sent is skipped as long as the new generation repeats it (greedy decoding does); if it diverges,
  the stream ends with an error event rather than with a wrong answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEvent
from runs.streaming.follow import iter_run_items, open_run_stream

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


@dataclass
class Completion:
    """What the run produced, as the stream said it."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: dict[str, str] | None = None
    """``{code, message}`` when the run did not end ``done``."""


@dataclass
class _Follower:
    """Turns stream entries into new text, skipping what a restarted generation repeats."""

    sent: str = ""
    regenerated: str | None = None
    """Text of the current attempt after a ``reset``, until it has caught up with ``sent``."""

    def reset(self) -> None:
        self.regenerated = ""

    def add(self, text: str) -> str:
        """The part of ``text`` that is new to the client; raises ``ValueError`` when the restart diverged."""
        if self.regenerated is None:
            self.sent += text
            return text
        self.regenerated += text
        if len(self.regenerated) <= len(self.sent):
            if not self.sent.startswith(self.regenerated):
                raise ValueError("diverged")
            return ""
        if not self.regenerated.startswith(self.sent):
            raise ValueError("diverged")
        new = self.regenerated[len(self.sent) :]
        self.sent, self.regenerated = self.regenerated, None
        return new


def _end(data: dict[str, Any], completion: Completion) -> None:
    status = data.get("status")
    if status == RunStatus.DONE:
        # OpenAI's finish reasons: "length" when max_tokens cut the answer, else "stop".
        completion.finish_reason = "length" if data.get("finish_reason") == FinishReason.LENGTH else "stop"
        usage = data.get("usage") or {}
        completion.usage = {
            "prompt_tokens": int(usage.get("input_tokens", 0)),
            "completion_tokens": int(usage.get("output_tokens", 0)),
            "total_tokens": int(usage.get("total_tokens", 0)),
        }
    elif status == RunStatus.CANCELLED:
        completion.error = {"code": "run_cancelled", "message": "The run was cancelled before it finished."}
    else:
        completion.error = {
            "code": str(data.get("code") or "generation_failed"),
            "message": str(data.get("message") or "Generation failed."),
        }


async def follow_run(run: Run, completion: Completion) -> AsyncIterator[str | None]:
    """Yields each piece of new text, and None for a silence (keep-alive); fills ``completion`` at the end."""
    opened = await open_run_stream(run=run, after_seq=0)
    follower = _Follower()
    # An OpenAI stream cannot be resumed elsewhere: it keeps going while this process shuts down.
    async for item in iter_run_items(run_id=run.pk, after_seq=0, opened=opened, end_on_drain=False):
        if item.keepalive:
            yield None
        if item.gone:
            completion.error = {"code": "not_found", "message": "This run no longer exists."}
            return
        for entry in item.entries:
            if entry.event == StreamEvent.RESET:
                follower.reset()
            elif entry.event == StreamEvent.DELTA:
                try:
                    new = follower.add(entry.data.get("text", ""))
                except ValueError:
                    completion.error = {
                        "code": "generation_restarted",
                        "message": "A worker failed mid-answer and the restarted answer differs from the text "
                        "already sent; send the request again.",
                    }
                    return
                if new:
                    completion.text += new
                    yield new
            elif entry.event in (StreamEvent.DONE, StreamEvent.ERROR):
                _end(entry.data, completion)
                return


def _frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def chunk(run: Run, model: str, delta: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": completion_id(run),
        "object": "chat.completion.chunk",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def completion_id(run: Run) -> str:
    return f"chatcmpl-{run.pk}"


async def sse_chunks(run: Run, *, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    """The body of a streamed ``/v1/chat/completions`` answer (``text/event-stream``)."""
    completion = Completion()
    yield _frame(chunk(run, model, {"role": "assistant", "content": ""}))
    async for piece in follow_run(run, completion):
        yield KEEPALIVE if piece is None else _frame(chunk(run, model, {"content": piece}))
    if completion.error is not None:
        yield _frame({"error": {"message": completion.error["message"], "type": "server_error", **completion.error}})
        return
    yield _frame(chunk(run, model, {}, completion.finish_reason))
    if include_usage:
        yield _frame({**chunk(run, model, {}), "choices": [], "usage": completion.usage})
    yield DONE


async def collect(run: Run) -> Completion:
    """Waits for the run's end; the whole answer, as the stream carried it."""
    completion = Completion()
    async for _ in follow_run(run, completion):
        pass
    return completion


def completion_body(run: Run, *, model: str, content: str, completion: Completion) -> dict[str, Any]:
    return {
        "id": completion_id(run),
        "object": "chat.completion",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": completion.finish_reason,
            }
        ],
        "usage": completion.usage,
    }
