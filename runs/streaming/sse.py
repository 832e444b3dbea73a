"""SSE framing of a followed run stream: the body of ``GET /api/runs/{id}/stream``.

Wire protocol (django-eventstream's framing, byte for byte: ``django_eventstream.utils.sse_encode_event``;
one channel per run, so ids are the plain sequence numbers of the run's Redis Stream):
``event: delta|status|reset|done|error``, ``id: N``, ``data: {json}``. The stream ends after ``done`` or
``error``. A client rebuilds the text as: ``reset`` empties it, ``delta`` appends ``text``. Keep-alive
comments (``: keep-alive``) fill silences.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from runs.streaming.contract import StreamEvent
from runs.streaming.follow import GONE_ERROR, OpenedStream, iter_run_items
from runs.streaming.relay import Entry, RawEntry, Relay

KEEPALIVE = b": keep-alive\n\n"
RECONNECT = "reconnect"
"""The last event of a stream cut short by a web process shutting down (not a run event: it is never stored)."""
RECONNECT_RETRY_MS = 1000


def reconnect_event(*, last_event_id: int) -> bytes:
    """``reconnect`` with the client's resume point, and ``retry:`` so EventSource comes back within a second."""
    body = json.dumps({"last_event_id": last_event_id}, separators=(",", ":")).encode()
    return b"retry: %d\nevent: %s\ndata: %s\n\n" % (RECONNECT_RETRY_MS, RECONNECT.encode(), body)


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


async def iter_run_events(
    *, run_id: int, after_seq: int, opened: OpenedStream, relay: Relay | None = None
) -> AsyncIterator[bytes]:
    """The SSE body of ``GET /api/runs/{id}/stream``: :func:`iter_run_items` in this module's wire protocol."""
    cursor = after_seq
    async for item in iter_run_items(run_id=run_id, after_seq=after_seq, opened=opened, relay=relay):
        if item.entries:
            cursor = item.entries[-1].seq
            yield encode_all(item.entries)
        elif item.status is not None:
            yield encode(StreamEvent.STATUS, {"status": item.status}, None)
        elif item.gone:
            yield encode(StreamEvent.ERROR, GONE_ERROR, None)
        elif item.reconnect:
            yield reconnect_event(last_event_id=cursor)
        else:
            yield KEEPALIVE
