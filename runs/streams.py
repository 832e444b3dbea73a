"""The contract of a run's token stream in Redis.

One Redis Stream per run, key ``run:{id}:events``, written by exactly one worker at a time with explicit
integer ids ``0-1, 0-2, ...`` so the SSE ``id:`` is the plain sequence number (django-eventstream parses
ids with ``int()``). Every entry has two fields: ``event`` (one of :class:`StreamEvent`) and ``data``
(a JSON object). The stream ends with exactly one terminal event (``done`` or ``error``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis
from django.conf import settings

from chatproject.redis_client import get_redis


class StreamEvent(StrEnum):
    DELTA = "delta"
    STATUS = "status"
    RESET = "reset"
    DONE = "done"
    ERROR = "error"


TERMINAL_EVENTS = frozenset({StreamEvent.DONE, StreamEvent.ERROR})


def stream_key(run_id: int) -> str:
    return f"run:{run_id}:events"


def cancel_key(run_id: int) -> str:
    """Set (with a TTL) when a streaming run is to be aborted; the worker polls it between engine steps."""
    return f"run:{run_id}:cancel"


def cancel_channel() -> str:
    """Pub/sub channel that carries run ids to abort, so workers react within one engine step."""
    return "runs:cancel"


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
    raw = client.xrange(stream_key(run_id), min=f"({0}-{after_seq}" if after_seq else "-", max="+")
    return [parse_entry(entry_id, fields) for entry_id, fields in raw]


def last_seq(run_id: int, *, client: redis.Redis | None = None) -> int:
    client = client or get_redis()
    last = client.xrevrange(stream_key(run_id), count=1)
    return int(last[0][0].split("-", 1)[1]) if last else 0


class RunStreamWriter:
    """Appends events to one run's stream. Not thread-safe: one writer per run at a time.

    A redelivered run builds a new writer; it resumes numbering after the last buffered id so ids stay
    strictly increasing and clients resuming with ``Last-Event-ID`` never miss the ``reset`` event.
    """

    def __init__(self, run_id: int, *, client: redis.Redis | None = None) -> None:
        self.run_id = run_id
        self.key = stream_key(run_id)
        self.client = client or get_redis()
        self.seq = last_seq(run_id, client=self.client)
        self._expiry_set = False

    def append(self, event: StreamEvent, data: dict[str, Any]) -> int:
        self.seq += 1
        cfg = settings.STREAMS
        if self._expiry_set and event not in TERMINAL_EVENTS:
            self.client.xadd(
                self.key,
                {"event": event.value, "data": json.dumps(data)},
                id=f"0-{self.seq}",
                maxlen=cfg.maxlen,
                approximate=True,
            )
            return self.seq
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(
            self.key,
            {"event": event.value, "data": json.dumps(data)},
            id=f"0-{self.seq}",
            maxlen=cfg.maxlen,
            approximate=True,
        )
        pipe.expire(self.key, cfg.done_ttl_s if event in TERMINAL_EVENTS else cfg.live_ttl_s)
        pipe.execute()
        self._expiry_set = True
        return self.seq
