"""Following one run's stream: replay after the client's last id, then live entries through the process's relay,
with Postgres filling in what Redis no longer holds.

Where the Redis Stream has expired (or was trimmed), the final state comes from Postgres: ``reset`` (only
if the client had events), the whole assistant message as one ``delta``, then the terminal event; their
ids continue after the client's. ``status`` items built from Postgres (a queued run, before the worker
writes anything) carry no id, so they never move the client's resume point. The consumers turn
:class:`StreamItem` steps into their wire format: SSE (``runs.streaming.sse``) or OpenAI chunks (``openai_api``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

import redis
from django.conf import settings

from core.db_executor import db_read
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEntry, StreamEvent, run_terminal_event
from runs.streaming.drain import draining
from runs.streaming.relay import Entry, Relay, get_relay, is_terminal
from runs.streaming.status_reads import get_status_reader

logger = logging.getLogger(__name__)


def coalesce(entries: Iterable[Entry]) -> list[Entry]:
    """Merges runs of consecutive deltas into one (carrying the last one's id): a client that fell behind
    gets fewer, larger events, and resuming from that id is still exact. ``text`` and ``logprobs`` are
    joined and ``tokens`` summed; other fields are the first delta's (a benchmark's write timestamp then
    measures the oldest text in the event)."""
    out: list[Entry] = []
    for entry in entries:
        prev = out[-1] if out else None
        if prev is not None and prev.event == StreamEvent.DELTA and entry.event == StreamEvent.DELTA:
            data = {**prev.data, "text": prev.data.get("text", "") + entry.data.get("text", "")}
            if "tokens" in prev.data or "tokens" in entry.data:
                data["tokens"] = int(prev.data.get("tokens", 0)) + int(entry.data.get("tokens", 0))
            if "logprobs" in prev.data or "logprobs" in entry.data:
                data["logprobs"] = [*prev.data.get("logprobs", []), *entry.data.get("logprobs", [])]
            out[-1] = StreamEntry(seq=entry.seq, event=StreamEvent.DELTA, data=data)
        else:
            out.append(entry)
    return out


def final_state_entries(run: Run, *, after_seq: int) -> list[StreamEntry]:
    """The finished run as stream entries rebuilt from Postgres, numbered after ``after_seq``."""
    entries: list[StreamEntry] = []
    seq = after_seq
    if run.finish_reason == FinishReason.CONTENT_FILTER:  # the same decision the live stream made: withdrawn
        seq += 1
        entries.append(StreamEntry(seq=seq, event=StreamEvent.RETRACT, data={}))
    elif after_seq > 0:
        seq += 1
        entries.append(StreamEntry(seq=seq, event=StreamEvent.RESET, data={}))
    message = run.assistant_message
    if message is not None and message.content:
        seq += 1
        entries.append(StreamEntry(seq=seq, event=StreamEvent.DELTA, data={"text": message.content}))
    event, data = run_terminal_event(run)
    entries.append(StreamEntry(seq=seq + 1, event=event, data=data))
    return entries


def _load_finished_run(run_id: int) -> Run | None:
    return Run.objects.select_related("assistant_message").filter(pk=run_id).first()


async def _poll_status(run_id: int) -> tuple[bool, str | None]:
    """(whether Postgres answered, the run's status there: None when the run is gone)."""
    try:
        return True, await get_status_reader().status(run_id)
    except Exception:  # noqa: BLE001 - a Postgres hiccup (a restart): unknown, which is not "gone"; ask next poll
        return False, None


async def _load_finished_run_or_none(run_id: int) -> Run | None:
    try:
        return await db_read(_load_finished_run, run_id)
    except Exception:  # noqa: BLE001 - as above: the next poll tries again
        logger.warning("SSE: run %s: reading its final state failed; trying again at the next poll", run_id)
        return None


@dataclass
class OpenedStream:
    """The result of opening a run's stream: what to send first, and whether to follow it live."""

    first: Sequence[Entry]
    live: bool
    initial_status: str | None
    """A run with nothing in Redis yet (queued): its status from Postgres, sent as the first event."""


async def open_run_stream(*, run: Run, after_seq: int, relay: Relay | None = None) -> OpenedStream:
    """Replays the buffered entries after ``after_seq``; falls back to Postgres when the buffer is gone.

    ``run`` is the owner's run as just read (status current). A stream already complete for this client
    (its id is at or past the terminal event) gives ``first=[]`` and ``live=False``.
    """
    relay = relay or get_relay()
    try:
        entries, last = await relay.read_after(run.pk, after_seq)
    except redis.RedisError as exc:
        # Redis is unreachable (restarting?): never a 500. A finished run comes from Postgres; an unfinished one
        # is followed as a run with nothing in Redis yet: its status from Postgres, then the relay, which
        # reconnects by itself, delivers what comes after the client's id.
        logger.warning("SSE: run %s: Redis unavailable at open (%s); following from Postgres for now", run.pk, exc)
        entries, last = [], None
    if last is not None and is_terminal(last) and last.seq <= after_seq:
        return OpenedStream(first=[], live=False, initial_status=None)
    trimmed = bool(entries) and entries[0].seq > after_seq + 1 and entries[0].event != StreamEvent.RESET
    if (last is None or trimmed) and run.is_terminal:
        finished = await _load_finished_run_or_none(run.pk)  # None: followed live, its status polls end it
        if finished is not None:
            return OpenedStream(
                first=final_state_entries(finished, after_seq=after_seq), live=False, initial_status=None
            )
    if trimmed:
        logger.warning("SSE: run %s stream trimmed before id %s; replaying what is left", run.pk, after_seq)
    terminal_seen = any(is_terminal(entry) for entry in entries)
    initial_status = run.status if last is None else None
    return OpenedStream(first=entries, live=not terminal_seen, initial_status=initial_status)


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One step of a followed stream: entries to deliver, a status read from Postgres, or a silence to fill."""

    entries: Sequence[Entry] = ()
    """In order, consecutive deltas merged; the last one terminal when the stream ends with it."""
    status: str | None = None
    """The run's status from Postgres (a queued run); it has no id in the stream."""
    keepalive: bool = False
    gone: bool = False
    """The run was deleted while followed: the stream ends here."""
    reconnect: bool = False
    """This process is shutting down: the stream ends here, and the client resumes from its last id."""


KEEPALIVE_ITEM = StreamItem(keepalive=True)
GONE_ITEM = StreamItem(gone=True)
RECONNECT_ITEM = StreamItem(reconnect=True)
GONE_ERROR = {"code": "not_found", "message": "This run no longer exists."}


async def iter_run_items(
    *,
    run_id: int,
    after_seq: int,
    opened: OpenedStream,
    relay: Relay | None = None,
    end_on_drain: bool = True,
) -> AsyncIterator[StreamItem]:
    """A run's stream as :class:`StreamItem` steps: the opening entries, then live ones until the terminal event.

    While nothing comes from Redis for ``status_poll_s``, the run's status is re-read from Postgres: a
    change is a ``status`` item, and a run that Postgres says is finished but whose terminal event never
    reaches the stream (cancelled while queued, its stream expired) ends with its final state. A silence of
    ``keepalive_s`` gives a keep-alive item. Leaving (the consumer stops) only drops the subscription.
    When the process is shutting down (``runs.streaming.drain``) and ``end_on_drain``, what has arrived is
    delivered, then a ``reconnect`` item ends the stream (within one wait, at most ``status_poll_s``).
    """
    relay = relay or get_relay()
    cfg = settings.STREAMS
    cursor = after_seq
    if opened.initial_status is not None:
        yield StreamItem(status=opened.initial_status)
    if opened.first:
        yield StreamItem(entries=coalesce(opened.first))
        cursor = opened.first[-1].seq
    if not opened.live:
        return
    sub, catch_up = await relay.subscribe(run_id, cursor)
    try:
        pending: list[Entry] = list(catch_up)
        last_status = opened.initial_status
        last_write = last_entry_at = time.monotonic()
        finished_in_db_at: float | None = None
        while True:
            if end_on_drain and not pending and draining():
                yield RECONNECT_ITEM
                return
            if not pending:
                pending = await sub.next_batch(min(cfg.status_poll_s, cfg.keepalive_s))
            now = time.monotonic()
            if pending:
                batch, pending = coalesce(pending), []
                cursor = batch[-1].seq
                yield StreamItem(entries=batch)
                last_write = last_entry_at = now
                finished_in_db_at = None
                if any(is_terminal(e) for e in batch):
                    return
                continue
            if now - last_entry_at >= cfg.status_poll_s:
                last_entry_at = now
                answered, status = await _poll_status(run_id)
                if answered and status is None:
                    yield GONE_ITEM
                    return
                if answered and status is not None and RunStatus(status).is_terminal:
                    # The worker commits the message, then appends the terminal event: allow it one poll.
                    if finished_in_db_at is None:
                        finished_in_db_at = now
                    elif now - finished_in_db_at >= cfg.status_poll_s:
                        finished = await _load_finished_run_or_none(run_id)
                        if finished is not None:
                            yield StreamItem(entries=final_state_entries(finished, after_seq=cursor))
                            return
                elif answered and status != last_status:
                    yield StreamItem(status=status)
                    last_status = status
                    last_write = now
            if now - last_write >= cfg.keepalive_s:
                yield KEEPALIVE_ITEM
                last_write = now
    finally:
        relay.unsubscribe(sub)
