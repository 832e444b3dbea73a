"""The contract of a run's token stream in Redis.

One Redis Stream per run, key ``run:{id}:events``, written by exactly one worker at a time with explicit
integer ids ``0-1, 0-2, ...`` so the SSE ``id:`` is the plain sequence number (django-eventstream parses
ids with ``int()``). Every entry has two fields: ``event`` (one of :class:`StreamEvent`) and ``data``
(a JSON object). The stream ends with exactly one terminal event (``done`` or ``error``).

A ``delta`` is ``{"text": str, "tokens": int}``, with ``"prompt_tokens"`` (the prompt's length as the engine
counted it) on an attempt's first delta, plus ``"logprobs"`` when the run asked for them
(``SamplingSpec.logprobs``): one entry per generated token, in OpenAI's shape,
``{"token": str, "logprob": float, "bytes": [int], "top_logprobs": [{"token", "logprob", "bytes"}]}``.

A ``reset`` empties the text shown so far (an attempt that starts the answer over); a ``retract`` too, for good
(the output moderation pass flagged the answer). An attempt that instead goes
on from the text so far (its worker died or drained mid-answer) writes no ``reset``: its ``status`` event carries
``"continued_from_tokens"`` and its deltas follow the earlier ones (:func:`streamed_answer` reads that text).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis
from django.conf import settings

from core.redis_client import get_redis
from runs.models import Run, RunStatus
from runs.streaming.batch import PipelineBatcher, Submission


class StreamEvent(StrEnum):
    DELTA = "delta"
    STATUS = "status"
    RESET = "reset"
    RETRACT = "retract"
    """The output moderation pass withdrew the answer (``{"categories": [...]}``): clients drop its text; the run
    ends ``done`` with finish reason ``content_filter`` and a retracted (empty) stored message."""
    DONE = "done"
    ERROR = "error"


TERMINAL_EVENTS = frozenset({StreamEvent.DONE, StreamEvent.ERROR})


def stream_key(run_id: int) -> str:
    return f"run:{run_id}:events"


def active_streams_key() -> str:
    """Sorted set of the runs being written now (member: run id, score: last refresh, unix seconds)."""
    return "streams:active"


# A writer refreshes its run's entry in the active set this often; entries older than the stale age are
# dropped, so a crashed worker's runs stop counting as load within a minute.
ACTIVE_REFRESH_S = 10.0
ACTIVE_STALE_S = 60.0


@dataclass(frozen=True)
class StreamEntry:
    seq: int
    event: StreamEvent
    data: dict[str, Any]


def parse_entry(entry_id: str, fields: dict[str, str]) -> StreamEntry:
    return StreamEntry(
        seq=int(entry_id.split("-", 1)[1]),
        event=StreamEvent(fields["event"]),
        data=json.loads(fields.get("data") or "{}"),
    )


def read_after(run_id: int, after_seq: int, *, client: redis.Redis | None = None) -> list[StreamEntry]:
    """Every entry after ``after_seq`` that is still buffered (none once the stream expired)."""
    client = client or get_redis()
    raw: list[tuple[str, dict[str, str]]] = client.xrange(  # type: ignore[assignment]
        stream_key(run_id), min=f"(0-{after_seq}" if after_seq else "-", max="+"
    )
    return entries_in(raw)


def read_after_in(pipe: redis.client.Pipeline, run_id: int, after_seq: int) -> None:
    """:func:`read_after` queued on ``pipe`` (a caller that sends it with more); :func:`entries_in` parses its reply."""
    pipe.xrange(stream_key(run_id), min=f"(0-{after_seq}" if after_seq else "-", max="+")


def entries_in(reply: list[tuple[str, dict[str, str]]]) -> list[StreamEntry]:
    """The entries of an ``XRANGE`` reply (:func:`read_after_in`'s)."""
    return [parse_entry(entry_id, fields) for entry_id, fields in reply]


@dataclass(frozen=True)
class StreamedAnswer:
    """What a run's stream shows of its answer: the deltas since its last ``reset``, what a client following it
    displays (the text of every earlier attempt that went on from the one before, without one)."""

    text: str
    tokens: int
    logprobs: list[dict[str, Any]]
    """Every delta's ``logprobs`` entries, in order (empty when the run asked for none)."""
    prompt_tokens: int | None
    """The prompt's length as the engine counted it for the attempt that began this text (its first delta's
    ``prompt_tokens``); None when no delta carried it (a text resent whole after Redis lost entries)."""
    intact: bool
    """False when the stream no longer holds the start of this text (trimmed to its ``maxlen``): what a client
    shows cannot be known from it, and ``text`` is only its tail."""


def streamed_answer(run_id: int, *, client: redis.Redis | None = None) -> StreamedAnswer:
    """The answer the run's stream shows now (one round trip); an empty answer when the stream holds none."""
    return answer_in(read_after(run_id, 0, client=client))


def answer_in(entries: list[StreamEntry]) -> StreamedAnswer:
    """The answer a run's whole stream shows (``entries``: every entry still buffered, as :func:`read_after` from 0
    returns them); an empty answer when they hold none."""
    resets = [i for i, entry in enumerate(entries) if entry.event == StreamEvent.RESET]
    start = resets[-1] + 1 if resets else 0
    intact = bool(resets) or not entries or entries[0].seq == 1
    text: list[str] = []
    tokens = 0
    logprobs: list[dict[str, Any]] = []
    prompt_tokens: int | None = None
    for entry in entries[start:]:
        if entry.event != StreamEvent.DELTA:
            continue
        if prompt_tokens is None and "prompt_tokens" in entry.data:
            prompt_tokens = int(entry.data["prompt_tokens"])
        text.append(str(entry.data.get("text", "")))
        tokens += int(entry.data.get("tokens", 0))
        logprobs.extend(entry.data.get("logprobs", []))
    return StreamedAnswer(
        text="".join(text), tokens=tokens, logprobs=logprobs, prompt_tokens=prompt_tokens, intact=intact
    )


def last_seq(run_id: int, *, client: redis.Redis | None = None) -> int:
    client = client or get_redis()
    last: list[tuple[str, dict[str, str]]] = client.xrevrange(stream_key(run_id), count=1)  # type: ignore[assignment]
    return int(last[0][0].split("-", 1)[1]) if last else 0


class PendingAppend:
    """An append sent and not yet read (:meth:`RunStreamWriter.append_later`)."""

    __slots__ = ("seq", "submission", "writer")

    def __init__(self, writer: RunStreamWriter, seq: int, submission: Submission) -> None:
        self.writer = writer
        self.seq = seq
        """Its sequence number (the SSE ``id``)."""
        self.submission = submission

    @property
    def done(self) -> bool:
        """Redis has answered (or failed to): :meth:`result` does not wait."""
        return self.submission.done

    @property
    def answered_at(self) -> float:
        """When Redis answered (``time.monotonic()``; 0 until :attr:`done`)."""
        return self.submission.settled_at

    def result(self) -> int:
        """Waits for Redis's reply; returns the append's sequence number, or raises what :meth:`RunStreamWriter.append`
        would have (the writer then numbers its next append as if this one had not been written)."""
        return self.writer._answered(self.seq, self.submission)


class RunStreamWriter:
    """Appends events to one run's stream. Not thread-safe: one writer per run at a time.

    A redelivered run builds a new writer; it resumes numbering after the last buffered id so ids stay
    strictly increasing and clients resuming with ``Last-Event-ID`` never miss the ``reset`` event.
    """

    def __init__(
        self,
        run_id: int,
        *,
        client: redis.Redis | None = None,
        seq: int | None = None,
        batcher: PipelineBatcher | None = None,
    ) -> None:
        self.run_id = run_id
        self.key = stream_key(run_id)
        self.client = client or get_redis()
        self.batcher = batcher
        """With one, each append goes out in the process's shared pipeline of its tick (a worker's task threads:
        ``STREAM_BATCHED_WRITES``); without, in a pipeline of its own."""
        self.seq = last_seq(run_id, client=self.client) if seq is None else seq
        """The last id written (given: read by the caller, as :func:`append_to_many` does for many runs)."""
        self._expiry_set = False
        self._active_refreshed_at = 0.0
        self.gap: tuple[int, int] | None = None
        """Entries (first, last) that an append found missing before its own: Redis lost them. Whoever can
        write the text again (the worker's coalescer) repairs the stream and clears it."""

    def append(self, event: StreamEvent, data: dict[str, Any]) -> int:
        """Appends one event in one round trip (its own, or with a ``batcher`` the one its tick shares with every
        other run's appends); returns its sequence number (the SSE ``id``).

        When Redis does not answer (``ConnectionError``, ``TimeoutError``: it is restarting) the error is
        raised and the writer numbers its next append as if this one had not been written; whether it was (its
        reply lost) is for the caller to find out with :meth:`last_in_stream` once Redis answers again. The
        stream's TTL and active entry go out again with the next append.
        """
        return self.append_later(event, data).result()

    def append_later(self, event: StreamEvent, data: dict[str, Any]) -> PendingAppend:
        """:meth:`append` without waiting for Redis's reply when the writer has a ``batcher`` (without one the
        append is sent at once): the returned :class:`PendingAppend`'s ``result()`` is what :meth:`append` would
        have returned or raised. Read it before the writer's next append: that one is numbered as if this one
        had been written."""
        return self._append_in(event, data)[0]

    def append_with(
        self, event: StreamEvent, data: dict[str, Any], *, reads: Callable[[redis.client.Pipeline], None]
    ) -> list[Any]:
        """:meth:`append`, with what ``reads`` queues on its pipeline sent in the same round trip, after the append
        (so Redis reads them once the event is in the stream); returns the replies of those reads (the append's
        sequence number is :attr:`seq`). Raises as :meth:`append` does (a failed read fails the whole)."""
        pending, first = self._append_in(event, data, reads=reads)
        pending.result()
        return pending.submission.replies[first:]

    def _append_in(
        self,
        event: StreamEvent,
        data: dict[str, Any],
        *,
        reads: Callable[[redis.client.Pipeline], None] | None = None,
    ) -> tuple[PendingAppend, int]:
        """The append sent (the batcher's or a pipeline of its own), and where ``reads``' replies start in its
        replies."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xrevrange(self.key, count=1)  # the entry before this one, in the same round trip
        seq = self.queue(pipe, event, data)
        first = len(pipe.command_stack)
        if reads is not None:
            reads(pipe)
        if self.batcher is not None:
            return PendingAppend(self, seq, self.batcher.submit(self.client, pipe.command_stack)), first
        try:
            return PendingAppend(self, seq, Submission.settled(replies=pipe.execute())), first
        except Exception as exc:  # noqa: BLE001 - raised by the pending append's result(), as a batcher's would be
            return PendingAppend(self, seq, Submission.settled(error=exc)), first

    def _answered(self, seq: int, submission: Submission) -> int:
        """Reads the reply of append ``seq`` (waiting for it): on a failure the next append is numbered as if it had
        not been written, and its TTL and active entry go out again; entries Redis lost before it are :attr:`gap`."""
        try:
            replies = submission.wait()
        except (redis.ConnectionError, redis.TimeoutError):
            self.seq = seq - 1
            self._expiry_set = False
            self._active_refreshed_at = 0.0
            raise
        before = replies[0]
        last = int(before[0][0].split("-", 1)[1]) if before else 0
        if last < seq - 1:
            # Redis answers but no longer holds entries it acknowledged: a restart without them, or a Sentinel
            # failover to a replica they had not reached, that redis-py's retries hid from this append.
            self.gap = (last + 1, seq - 1)
        return seq

    def last_in_stream(self) -> int:
        """The id of the stream's last entry in Redis (0: none), for a writer resuming after Redis errors."""
        return last_seq(self.run_id, client=self.client)

    def written_up_to(self, seq: int) -> None:
        """Records that Redis holds the entries up to ``seq`` (a failed append that had landed after all)."""
        self.seq = max(self.seq, seq)

    def queue(self, pipe: redis.client.Pipeline, event: StreamEvent, data: dict[str, Any]) -> int:
        """Queues the commands of one append on ``pipe`` (the caller executes it; a process writing many
        runs can batch their appends): one ``XADD``; the first and the terminal append also set the TTL
        and the run's entry in the active set (the load :func:`current_flush_interval` reads), refreshed
        every ~10 s."""
        self.seq += 1
        cfg = settings.STREAMS
        terminal = event in TERMINAL_EVENTS
        _xadd(pipe, self.key, event, data, entry_id=f"0-{self.seq}")
        if terminal or not self._expiry_set:
            pipe.expire(self.key, cfg.done_ttl_s if terminal else cfg.live_ttl_s)
            self._expiry_set = True
        now = time.time()
        if terminal:
            pipe.zrem(active_streams_key(), str(self.run_id))
        elif now - self._active_refreshed_at >= ACTIVE_REFRESH_S:
            pipe.zadd(active_streams_key(), {str(self.run_id): now})
            self._active_refreshed_at = now
        return self.seq


def terminal_append_in(pipe: redis.client.Pipeline, run_id: int, event: StreamEvent, data: dict[str, Any]) -> None:
    """A run's terminal event queued on ``pipe`` after whatever its stream holds (the caller executes it with the
    rest of a run's end: ``runs.lifecycle``), with the TTL of an ended stream and the run out of the active set.

    Its id is the next one Redis gives (``0-*``: the stream's last sequence number plus one), so the end needs no
    read of the stream's last id first, a round trip of its own; every id stays ``0-<seq>``, numbered on from the
    last entry, as a writer's appends are."""
    if event not in TERMINAL_EVENTS:
        raise ValueError(f"{event} is not a terminal event")
    key = stream_key(run_id)
    _xadd(pipe, key, event, data, entry_id="0-*")
    pipe.expire(key, settings.STREAMS.done_ttl_s)
    pipe.zrem(active_streams_key(), str(run_id))


def _xadd(pipe: redis.client.Pipeline, key: str, event: StreamEvent, data: dict[str, Any], *, entry_id: str) -> None:
    """One event's ``XADD``, the stream trimmed to about ``STREAMS.maxlen`` entries."""
    fields = {"event": event.value, "data": json.dumps(data)}
    pipe.xadd(key, fields, id=entry_id, maxlen=settings.STREAMS.maxlen, approximate=True)  # type: ignore[arg-type]


def append_to_many(events: list[tuple[int, StreamEvent, dict[str, Any]]], *, client: redis.Redis | None = None) -> int:
    """One event on each of many runs' streams in two round trips: every stream's last id, then every append
    (the dispatcher's queue positions, up to ``max_positions`` runs at a time, which took two round trips a run).
    An append whose id the run's own writer took meanwhile (it was dispatched and started) is refused by Redis
    and skipped: the run's status has moved on. Returns how many appends were refused."""
    if not events:
        return 0
    client = client or get_redis()
    reads = client.pipeline(transaction=False)
    for run_id, _event, _data in events:
        reads.xrevrange(stream_key(run_id), count=1)
    lasts = reads.execute()
    writes = client.pipeline(transaction=False)
    for (run_id, event, data), last in zip(events, lasts, strict=True):
        seq = int(last[0][0].split("-", 1)[1]) if last else 0
        RunStreamWriter(run_id, client=client, seq=seq).queue(writes, event, data)
    replies = writes.execute(raise_on_error=False)
    return sum(isinstance(reply, redis.ResponseError) for reply in replies)


def run_terminal_event(run: Run) -> tuple[StreamEvent, dict[str, Any]]:
    """The terminal event that describes a finished run, as the worker writes it and as the SSE endpoint
    rebuilds it from Postgres once the stream has expired: ``error`` for a failed run, else ``done``."""
    if run.status == RunStatus.FAILED:
        return StreamEvent.ERROR, {"code": "generation_failed", "message": run.error or "Generation failed."}
    return StreamEvent.DONE, {
        "message_id": run.assistant_message_id,
        "finish_reason": run.finish_reason,
        "status": run.status,
        "usage": {
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "total_tokens": run.input_tokens + run.output_tokens,
        },
    }
