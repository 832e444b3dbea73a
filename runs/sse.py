"""A run's events as an SSE stream: replay after ``Last-Event-ID``, then live through the process's relay.

Wire protocol (django-eventstream's SSE framing, one channel per run, so ids are the plain sequence numbers
of the run's Redis Stream): ``event: delta|status|reset|done|error``, ``id: N``, ``data: {json}``. The
stream ends after ``done`` or ``error``. A client rebuilds the text as: ``reset`` empties it, ``delta``
appends ``text``. Keep-alive comments (``: keep-alive``) fill silences.

Where the Redis Stream has expired (or was trimmed), the final state comes from Postgres: ``reset`` (only
if the client had events), the whole assistant message as one ``delta``, then the terminal event; their
ids continue after the client's. ``status`` events built from Postgres (a queued run, before the worker
writes anything) carry no id, so they never move the client's resume point.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django_eventstream.event import Event
from django_eventstream.storage import StorageBase

from runs.models import TERMINAL_STATUSES, Run
from runs.relay import Entry, RawEntry, StreamRelay, get_relay, is_terminal
from runs.streams import StreamEntry, StreamEvent, read_after, run_terminal_event, stream_key

logger = logging.getLogger(__name__)

KEEPALIVE = b": keep-alive\n\n"


def encode(event: StreamEvent, data: dict[str, Any], seq: int | None) -> bytes:
    """One SSE event, framed as django-eventstream frames them (``event:``, ``id:``, one ``data:`` line)."""
    body = json.dumps(data, separators=(",", ":")).encode()
    if seq is None:
        return b"event: %s\ndata: %s\n\n" % (event.value.encode(), body)
    return b"event: %s\nid: %d\ndata: %s\n\n" % (event.value.encode(), seq, body)


def encode_entry(entry: Entry) -> bytes:
    """A stream entry as an SSE event; the JSON goes out as Redis holds it when it is one line (it always is
    from ``RunStreamWriter``: ``json.dumps`` escapes newlines)."""
    if isinstance(entry, RawEntry) and b"\n" not in entry.raw and b"\r" not in entry.raw:
        return b"event: %s\nid: %d\ndata: %s\n\n" % (entry.event.value.encode(), entry.seq, entry.raw)
    return encode(entry.event, entry.data, entry.seq)


def encode_all(entries: Iterable[Entry]) -> bytes:
    return b"".join(encode_entry(entry) for entry in entries)


def coalesce(entries: Iterable[Entry]) -> list[Entry]:
    """Merges runs of consecutive deltas into one (carrying the last one's id): a client that fell behind
    gets fewer, larger events, and resuming from that id is still exact. Fields other than ``text`` are
    the first delta's (a benchmark's write timestamp then measures the oldest text in the event)."""
    out: list[Entry] = []
    for entry in entries:
        prev = out[-1] if out else None
        if prev is not None and prev.event == StreamEvent.DELTA and entry.event == StreamEvent.DELTA:
            text = prev.data.get("text", "") + entry.data.get("text", "")
            out[-1] = StreamEntry(seq=entry.seq, event=StreamEvent.DELTA, data={**prev.data, "text": text})
        else:
            out.append(entry)
    return out


def final_state_entries(run: Run, *, after_seq: int) -> list[StreamEntry]:
    """The finished run as stream entries rebuilt from Postgres, numbered after ``after_seq``."""
    entries: list[StreamEntry] = []
    seq = after_seq
    if after_seq > 0:
        seq += 1
        entries.append(StreamEntry(seq=seq, event=StreamEvent.RESET, data={}))
    message = run.assistant_message
    if message is not None and message.content:
        seq += 1
        entries.append(StreamEntry(seq=seq, event=StreamEvent.DELTA, data={"text": message.content}))
    event, data = run_terminal_event(run)
    entries.append(StreamEntry(seq=seq + 1, event=event, data=data))
    return entries


T = TypeVar("T")

# Every database read of the SSE path runs on these few threads, each keeping its connection: a stream
# holds no connection (nor thread) of its own while it waits, so thousands of streams need a handful.
_db_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sse-db")


def _with_connection(fn: Callable[..., T], *args: object) -> T:
    try:
        return fn(*args)
    except (OperationalError, InterfaceError):
        connection.close()  # broken (Postgres restarted?): the next call opens a new one
        raise


async def db_call(fn: Callable[..., T], *args: object) -> T:
    """Runs a synchronous ORM function on the SSE database threads."""
    return await asyncio.get_running_loop().run_in_executor(_db_executor, _with_connection, fn, *args)


def db_submit(fn: Callable[..., object], /, **kwargs: object) -> None:
    """Runs a synchronous ORM function on the SSE database threads without waiting for it: for cleanup in a
    task that is being cancelled (a client that went away), where awaiting is not possible. Errors are logged."""

    def log_failure(future: Future[object]) -> None:
        exc = future.exception()
        if exc is not None:
            logger.error("background database call %s failed", getattr(fn, "__name__", fn), exc_info=exc)

    _db_executor.submit(_with_connection, functools.partial(fn, **kwargs)).add_done_callback(log_failure)


def _load_finished_run(run_id: int) -> Run | None:
    return Run.objects.select_related("assistant_message").filter(pk=run_id).first()


def _load_statuses(run_ids: list[int]) -> dict[int, str]:
    return dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))


class RunStatusReader:
    """Batches the Postgres status reads of every idle stream in the process into one query."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[asyncio.Future[str | None]]] = {}
        self._flusher: asyncio.Task[None] | None = None

    async def status(self, run_id: int) -> str | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()
        self._waiting.setdefault(run_id, []).append(future)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0.01)
        batch, self._waiting, self._flusher = self._waiting, {}, None
        try:
            statuses = await db_call(_load_statuses, list(batch))
        except Exception as exc:  # noqa: BLE001 - the streams keep going and ask again at their next poll
            logger.warning("SSE: status read failed: %s", exc)
            for futures in batch.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        for run_id, futures in batch.items():
            for future in futures:
                if not future.done():
                    future.set_result(statuses.get(run_id))


_status_readers: dict[int, RunStatusReader] = {}


def get_status_reader() -> RunStatusReader:
    loop_id = id(asyncio.get_running_loop())
    reader = _status_readers.get(loop_id)
    if reader is None:
        _status_readers.clear()
        reader = _status_readers[loop_id] = RunStatusReader()
    return reader


@dataclass
class OpenedStream:
    """The result of opening a run's stream: what to send first, and whether to follow it live."""

    first: Sequence[Entry]
    live: bool
    initial_status: str | None
    """A run with nothing in Redis yet (queued): its status from Postgres, sent as the first event."""


async def open_run_stream(*, run: Run, after_seq: int, relay: StreamRelay | None = None) -> OpenedStream:
    """Replays the buffered entries after ``after_seq``; falls back to Postgres when the buffer is gone.

    ``run`` is the owner's run as just read (status current). A stream already complete for this client
    (its id is at or past the terminal event) gives ``first=[]`` and ``live=False``.
    """
    relay = relay or get_relay()
    entries, last = await relay.read_after(run.pk, after_seq)
    if last is not None and is_terminal(last) and last.seq <= after_seq:
        return OpenedStream(first=[], live=False, initial_status=None)
    trimmed = bool(entries) and entries[0].seq > after_seq + 1 and entries[0].event != StreamEvent.RESET
    if (last is None or trimmed) and run.status in TERMINAL_STATUSES:
        finished = await db_call(_load_finished_run, run.pk)
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


KEEPALIVE_ITEM = StreamItem(keepalive=True)
GONE_ITEM = StreamItem(gone=True)
GONE_ERROR = {"code": "not_found", "message": "This run no longer exists."}


async def iter_run_items(
    *, run_id: int, after_seq: int, opened: OpenedStream, relay: StreamRelay | None = None
) -> AsyncIterator[StreamItem]:
    """A run's stream as :class:`StreamItem` steps: the opening entries, then live ones until the terminal event.

    While nothing comes from Redis for ``status_poll_s``, the run's status is re-read from Postgres: a
    change is a ``status`` item, and a run that Postgres says is finished but whose terminal event never
    reaches the stream (cancelled while queued, its stream expired) ends with its final state. A silence of
    ``keepalive_s`` gives a keep-alive item. Leaving (the consumer stops) only drops the subscription.
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
                try:
                    status = await get_status_reader().status(run_id)
                except Exception:  # noqa: BLE001 - a Postgres hiccup: keep streaming, ask again next time
                    status = last_status
                if status is None:
                    yield GONE_ITEM
                    return
                if status in TERMINAL_STATUSES:
                    # The worker commits the message, then appends the terminal event: allow it one poll.
                    if finished_in_db_at is None:
                        finished_in_db_at = now
                    elif now - finished_in_db_at >= cfg.status_poll_s:
                        finished = await db_call(_load_finished_run, run_id)
                        if finished is not None:
                            yield StreamItem(entries=final_state_entries(finished, after_seq=cursor))
                            return
                elif status != last_status:
                    yield StreamItem(status=status)
                    last_status = status
                    last_write = now
            if now - last_write >= cfg.keepalive_s:
                yield KEEPALIVE_ITEM
                last_write = now
    finally:
        relay.unsubscribe(sub)


async def iter_run_events(
    *, run_id: int, after_seq: int, opened: OpenedStream, relay: StreamRelay | None = None
) -> AsyncIterator[bytes]:
    """The SSE body of ``GET /api/runs/{id}/stream``: :func:`iter_run_items` in this module's wire protocol."""
    async for item in iter_run_items(run_id=run_id, after_seq=after_seq, opened=opened, relay=relay):
        if item.entries:
            yield encode_all(item.entries)
        elif item.status is not None:
            yield encode(StreamEvent.STATUS, {"status": item.status}, None)
        elif item.gone:
            yield encode(StreamEvent.ERROR, GONE_ERROR, None)
        else:
            yield KEEPALIVE


class RunStreamStorage(StorageBase):
    """django-eventstream storage backed by the runs' Redis Streams (channel ``run-{id}``), read-only.

    For code that reads run events through django-eventstream's own ``get_events`` (synchronous). The
    worker writes with :class:`runs.streams.RunStreamWriter`, never through ``send_event``, and the
    ``/api/runs/{id}/stream`` endpoint reads through the process's relay instead (see README).
    """

    @staticmethod
    def run_id(channel: str) -> int:
        prefix, _, run_id = channel.partition("-")
        if prefix != "run" or not run_id.isdigit():
            raise ValueError(f"not a run channel: {channel!r}")
        return int(run_id)

    def append_event(self, channel: str, event_type: str, data: Any) -> Event:
        raise NotImplementedError("run streams are written by the worker's RunStreamWriter")

    def get_events(self, channel: str, last_id: int, limit: int = 100) -> list[Event]:
        run_id = self.run_id(channel)
        entries = read_after(run_id, last_id)
        if not entries:
            run = _load_finished_run(run_id)
            from chatproject.redis_client import get_redis

            if run is not None and run.status in TERMINAL_STATUSES and not get_redis().exists(stream_key(run_id)):
                entries = final_state_entries(run, after_seq=last_id)
        return [Event(channel, e.event.value, json.dumps(e.data), id=e.seq) for e in entries[:limit]]

    def get_current_id(self, channel: str) -> int:
        from runs.streams import last_seq

        return last_seq(self.run_id(channel))
