"""A call's runs read back as OpenAI answers: streamed chunks, or collected into one response body.

Each choice of a call is a run of its own (``n`` > 1, or a list of prompts). Every run's stream is read through
the process's relay (``runs.streaming.follow.iter_run_items``), like ``GET /api/runs/{id}/stream``; the
formats (chat or text completion) are in ``openai_api.formats``. What differs from our own SSE protocol:

- No resumption: an OpenAI stream cannot be resumed, so a client that goes away cancels its runs.
- No ``reset``: OpenAI's stream cannot take text back. When a worker died and generation restarted, the text
  already sent is skipped as long as the new generation repeats it (greedy decoding does); if it diverges,
  the stream ends with an error event rather than with a wrong answer.
- No ``retract`` either: when the output moderation pass withdraws an answer (``runs.passes``), the choice ends
  with finish reason ``content_filter`` (OpenAI's) and a collected answer's content is empty, as the stored message
  is; a streamed one's chunks already sent are the client's to discard (a tier whose policy holds back a window
  sends none of the flagged text).
- The first chunk of a choice goes out with its first token (as vLLM and OpenAI send it), so a client's time
  to first token is the real one; keep-alive comments fill the wait before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEvent
from runs.streaming.follow import iter_run_items, open_run_stream

KEEPALIVE = b"\n\n"
"""What a silent stream sends every ``STREAMS.keepalive_s``: blank lines, which the SSE format says dispatch nothing
(the OpenAI client, browsers and vLLM's benchmark client skip them), and which keep proxies from closing an idle
connection. Not an SSE comment (``: keep-alive``): vLLM's benchmark client strips each read before it looks for the
blank line that ends a message, so a comment read on its own glued every later message to it and the client parsed
nothing more (a run that waited in the queue past one keep-alive was counted as failed)."""
DONE = b"data: [DONE]\n\n"


@dataclass
class Piece:
    """New output of one choice: its text and, when asked for, one log-probability entry per token."""

    text: str
    tokens: int = 0
    logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Completion:
    """What one run produced, as its stream said it."""

    text: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: dict[str, str] | None = None
    """``{code, message}`` when the run did not end ``done``."""


@dataclass
class _Follower:
    """Turns stream entries into new output, skipping what a restarted generation repeats."""

    sent: str = ""
    regenerated: str | None = None
    """Text of the current attempt after a ``reset``, until it has caught up with ``sent``."""
    regenerated_logprobs: list[dict[str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        self.regenerated = ""
        self.regenerated_logprobs = []

    def add(self, text: str, logprobs: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """The part of the output that is new to the client; ``ValueError`` when the restart diverged."""
        if self.regenerated is None:
            self.sent += text
            return text, logprobs
        self.regenerated += text
        self.regenerated_logprobs += logprobs
        if len(self.regenerated) <= len(self.sent):
            if not self.sent.startswith(self.regenerated):
                raise ValueError("diverged")
            return "", []
        if not self.regenerated.startswith(self.sent):
            raise ValueError("diverged")
        new = self.regenerated[len(self.sent) :]
        # The tokens whose text lies past what was sent (a token's text is its share of the answer).
        covered, skip = 0, 0
        for entry in self.regenerated_logprobs:
            if covered >= len(self.sent):
                break
            covered += len(str(entry.get("token", "")))
            skip += 1
        new_logprobs = self.regenerated_logprobs[skip:]
        self.sent, self.regenerated, self.regenerated_logprobs = self.regenerated, None, []
        return new, new_logprobs


def _end(data: dict[str, Any], completion: Completion) -> None:
    status = data.get("status")
    if status == RunStatus.DONE:
        # OpenAI's finish reasons: "length" when max_tokens cut the answer, else "stop".
        reason = data.get("finish_reason")
        completion.finish_reason = (
            "length"
            if reason == FinishReason.LENGTH
            else "content_filter"
            if reason == FinishReason.CONTENT_FILTER
            else "stop"
        )
        usage = data.get("usage") or {}
        completion.prompt_tokens = int(usage.get("input_tokens", 0))
        completion.completion_tokens = int(usage.get("output_tokens", 0))
    elif status == RunStatus.CANCELLED:
        completion.error = {"code": "run_cancelled", "message": "The run was cancelled before it finished."}
    else:
        completion.error = {
            "code": str(data.get("code") or "generation_failed"),
            "message": str(data.get("message") or "Generation failed."),
        }


async def follow_run(run: Run, completion: Completion) -> AsyncIterator[Piece | None]:
    """Yields each piece of new output, and None for a silence (keep-alive); fills ``completion`` at the end."""
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
            elif entry.event == StreamEvent.RETRACT:  # chunks sent cannot be taken back: the finish says it
                completion.text, completion.logprobs = "", []
            elif entry.event == StreamEvent.DELTA:
                try:
                    text, logprobs = follower.add(entry.data.get("text", ""), list(entry.data.get("logprobs", [])))
                except ValueError:
                    completion.error = {
                        "code": "generation_restarted",
                        "message": "A worker failed mid-answer and the restarted answer differs from the text "
                        "already sent; send the request again.",
                    }
                    return
                if "prompt_tokens" in entry.data and not completion.prompt_tokens:
                    completion.prompt_tokens = int(entry.data["prompt_tokens"])
                tokens = len(logprobs) if logprobs else int(entry.data.get("tokens", 0))
                if text or logprobs or tokens:  # tokens without text: a chunk with empty content, as vLLM's
                    completion.text += text
                    completion.logprobs += logprobs
                    completion.tokens += tokens
                    yield Piece(text=text, tokens=tokens, logprobs=logprobs)
            elif entry.event in (StreamEvent.DONE, StreamEvent.ERROR):
                _end(entry.data, completion)
                return


@dataclass(frozen=True)
class ChoiceEvent:
    """One step of a call's merged streams: choice ``index`` has a new piece, or has ended (``piece`` None and
    ``ended``), or nothing came for a while (``index`` -1, a keep-alive)."""

    index: int
    piece: Piece | None = None
    ended: bool = False


async def follow_choices(runs: Sequence[Run], completions: Sequence[Completion]) -> AsyncIterator[ChoiceEvent]:
    """Every choice's stream, merged in arrival order; each choice ends with an ``ended`` event."""
    if len(runs) == 1:  # the common case, without a task
        async for piece in follow_run(runs[0], completions[0]):
            yield ChoiceEvent(index=-1) if piece is None else ChoiceEvent(index=0, piece=piece)
        yield ChoiceEvent(index=0, ended=True)
        return
    queue: asyncio.Queue[ChoiceEvent | BaseException] = asyncio.Queue()

    async def pump(index: int) -> None:
        try:
            async for piece in follow_run(runs[index], completions[index]):
                await queue.put(ChoiceEvent(index=-1) if piece is None else ChoiceEvent(index=index, piece=piece))
            await queue.put(ChoiceEvent(index=index, ended=True))
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            await queue.put(exc)

    tasks = [asyncio.ensure_future(pump(index)) for index in range(len(runs))]
    try:
        remaining = len(runs)
        while remaining:
            event = await queue.get()
            if isinstance(event, BaseException):
                raise event
            if event.ended:
                remaining -= 1
            yield event
    finally:
        for task in tasks:
            task.cancel()


async def collect(runs: Sequence[Run]) -> list[Completion]:
    """Waits for every run's end; each answer as its stream carried it."""
    completions = [Completion() for _ in runs]
    async for _ in follow_choices(runs, completions):
        pass
    return completions
