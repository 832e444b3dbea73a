"""A few Redis readers per web process that multiplex every run stream the process serves.

Each SSE client used to need its own blocking ``XREAD``; here a reader task in the ASGI event loop issues a
single ``XREAD BLOCK`` over all its watched keys (``run:{id}:events``) and hands the entries to per-client
subscriptions. A process has ``STREAM_RELAY_READERS`` of them (:class:`ShardedRelay`), each owning the runs
whose id is its index modulo their number, on a connection of its own. A client joins with the last sequence
number it has; :meth:`StreamRelay.subscribe` closes the window between its replay (``XRANGE``) and the live
reads, so the client sees every entry exactly once and in order.

Adding a key interrupts the blocked read with ``CLIENT UNBLOCK`` (one command per join, not per token).

An ``XREAD`` over N keys costs Redis about 1 microsecond per key and redis-py several more to pack and
parse, whether or not the keys have news. So the reader packs the command itself (each key's RESP bytes
are cached; ids are re-encoded only when they move), parses hiredis' plain lists, and after a non-empty
read waits until ``per_key_pause_s`` x N (at most ``max_pause_s``) has passed since the previous one: a
lone stream is read at once, 2,000 streams are read in batches about every 20 ms.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.connection import Connection

from core.redis_client import make_async_pool
from runs.streaming.contract import TERMINAL_EVENTS, StreamEntry, StreamEvent, parse_entry, stream_key

logger = logging.getLogger(__name__)


class Subscription:
    """One client's view of one run's stream: the entries after ``cursor``, in order, each once."""

    __slots__ = ("_pending", "_waiter", "cursor", "key", "run_id")

    def __init__(self, run_id: int, cursor: int) -> None:
        self.run_id = run_id
        self.key = stream_key(run_id)
        self.cursor = cursor
        """Highest sequence number handed to this subscription so far."""
        self._pending: list[Entry] = []
        self._waiter: asyncio.Future[None] | None = None

    def offer(self, entry: Entry) -> None:
        if entry.seq <= self.cursor:
            return
        self.cursor = entry.seq
        self._pending.append(entry)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_batch(self, timeout: float) -> list[Entry]:
        """Every entry that arrived since the last call; an empty list after ``timeout`` seconds of nothing."""
        if not self._pending:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self._waiter = waiter
            handle = loop.call_later(timeout, _resolve, waiter)
            try:
                await waiter
            finally:
                handle.cancel()
                self._waiter = None
        batch, self._pending = self._pending, []
        return batch


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


@dataclass
class _WatchedKey:
    key: str
    read_seq: int
    """The reader's position in this key: the next XREAD asks for entries after it."""
    subscribers: set[Subscription] = field(default_factory=set)
    packed_key: bytes = b""
    packed_id: bytes = b""

    def __post_init__(self) -> None:
        self.packed_key = _bulk(self.key.encode())
        self.advance(self.read_seq)

    def advance(self, seq: int) -> None:
        self.read_seq = seq
        self.packed_id = _bulk(b"0-%d" % seq)


class RawEntry:
    """A stream entry as the reader got it; its JSON is parsed only if something needs the fields (merging
    deltas, a terminal check does not): a client that keeps up gets the bytes as Redis holds them."""

    __slots__ = ("_data", "event", "raw", "seq")

    def __init__(self, seq: int, event: StreamEvent, raw: bytes) -> None:
        self.seq = seq
        self.event = event
        self.raw = raw
        self._data: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = json.loads(self.raw)
        return self._data


Entry = StreamEntry | RawEntry

_EVENTS = {event.value.encode(): event for event in StreamEvent}


def _parse_raw_entry(raw_id: bytes, raw_fields: list[bytes]) -> RawEntry:
    fields = dict(zip(raw_fields[::2], raw_fields[1::2], strict=True))
    return RawEntry(int(raw_id.split(b"-", 1)[1]), _EVENTS[fields[b"event"]], fields.get(b"data") or b"{}")


@dataclass
class RelayStats:
    reads: int = 0
    entries: int = 0
    unblocks: int = 0
    watched_keys: int = 0


class StreamRelay:
    """The process's single reader. Create it in the event loop that serves the clients (see :func:`get_relay`)."""

    def __init__(
        self,
        redis_url: str,
        *,
        block_ms: int = 2000,
        count: int = 500,
        per_key_pause_s: float = 0.00001,
        max_pause_s: float = 0.03,
    ) -> None:
        self.redis_url = redis_url
        self.block_ms = block_ms
        self.count = count
        self.per_key_pause_s = per_key_pause_s
        self.max_pause_s = max_pause_s
        self.stats = RelayStats()
        self._keys: dict[str, _WatchedKey] = {}
        self._changed = asyncio.Event()
        self._blocked = False
        self._dirty = False
        self._unblocking = False
        self._reader_id: int | None = None
        self._task: asyncio.Task[None] | None = None
        # Replays and CLIENT UNBLOCK go through a small pool; a burst of joins waits for a free connection.
        self.commands = aioredis.Redis(
            connection_pool=make_async_pool(
                redis_url,
                max_connections=32,
                wait_timeout=30,
                # A paused or stalled Redis fails a stream's opening read in seconds (a 503), never hangs it.
                socket_timeout=settings.OUTAGES.redis_socket_timeout_s,
                socket_connect_timeout=settings.OUTAGES.redis_connect_timeout_s,
            )
        )

    # -- client side -------------------------------------------------------------------------------------

    async def read_after(self, run_id: int, after_seq: int) -> tuple[list[StreamEntry], StreamEntry | None]:
        """The buffered entries after ``after_seq`` and the stream's last entry (None: no stream), one round trip."""
        key = stream_key(run_id)
        pipe = self.commands.pipeline(transaction=False)
        pipe.xrange(key, min=f"(0-{after_seq}" if after_seq else "-", max="+")
        pipe.xrevrange(key, count=1)
        raw, last = await pipe.execute()
        entries = [parse_entry(entry_id, fields) for entry_id, fields in raw]
        return entries, (parse_entry(*last[0]) if last else None)

    async def subscribe(self, run_id: int, cursor: int) -> tuple[Subscription, list[StreamEntry]]:
        """Starts live delivery after ``cursor``; returns the subscription and the entries it must yield first.

        The reader may already be past ``cursor`` in this key (another client follows it): the entries in
        between are read here, after the subscription is registered, so nothing falls between the two.
        """
        self._ensure_started()
        sub = Subscription(run_id, cursor)
        watched = self._keys.get(sub.key)
        if watched is None:
            self._keys[sub.key] = _WatchedKey(key=sub.key, read_seq=cursor, subscribers={sub})
            self._changed.set()
            self._wake_reader()
            return sub, []
        watched.subscribers.add(sub)
        reader_seq = watched.read_seq
        if reader_seq <= cursor:
            return sub, []
        raw: list[tuple[str, dict[str, str]]] = await self.commands.xrange(  # type: ignore[assignment]
            sub.key, min=f"(0-{cursor}", max=f"0-{reader_seq}"
        )
        catch_up = [parse_entry(entry_id, fields) for entry_id, fields in raw]
        return sub, catch_up

    def unsubscribe(self, sub: Subscription) -> None:
        watched = self._keys.get(sub.key)
        if watched is None:
            return
        watched.subscribers.discard(sub)
        if not watched.subscribers:
            # The blocked read may still name the key; its entries are dropped when they come.
            del self._keys[sub.key]

    async def aclose(self) -> None:
        """Stops the reader and closes the connections (tests; a server process keeps its relay)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.commands.aclose()

    # -- reader side -------------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="stream-relay")

    def _wake_reader(self) -> None:
        self._dirty = True
        if self._blocked and not self._unblocking:
            self._unblocking = True
            asyncio.get_running_loop().create_task(self._unblock())

    async def _unblock(self) -> None:
        try:
            # The XREAD may not have reached Redis yet (UNBLOCK answers 0): try again for a moment.
            for _ in range(50):
                if not (self._blocked and self._dirty) or self._reader_id is None:
                    return
                if await self.commands.client_unblock(self._reader_id):
                    self.stats.unblocks += 1
                    return
                await asyncio.sleep(0.002)
        except redis.RedisError:
            logger.warning("stream relay: CLIENT UNBLOCK failed", exc_info=True)
        finally:
            self._unblocking = False

    async def _run(self) -> None:
        conn: Connection | None = None
        while True:
            try:
                if conn is None:
                    # A connection of its own, without a socket timeout: the XREAD blocks on purpose.
                    # Under Sentinel the connection asks for the current primary when it connects.
                    pool = make_async_pool(self.redis_url, socket_timeout=None, decode_responses=False)
                    conn = pool.make_connection()
                    await conn.connect()
                    await conn.send_command("CLIENT", "ID")
                    self._reader_id = int(await conn.read_response())
                await self._read_loop(conn)
            except asyncio.CancelledError:
                if conn is not None:
                    await conn.disconnect()
                raise
            except (redis.RedisError, OSError):
                logger.warning("stream relay: Redis error; reconnecting", exc_info=True)
                self._reader_id = None
                if conn is not None:
                    await conn.disconnect()
                conn = None
                await asyncio.sleep(0.5)
            except Exception:
                logger.exception("stream relay: unexpected error; restarting the reader")
                await asyncio.sleep(0.5)

    def _packed_xread(self) -> bytes:
        watched = list(self._keys.values())
        head = [b"XREAD", b"COUNT", str(self.count).encode(), b"BLOCK", str(self.block_ms).encode(), b"STREAMS"]
        parts = [b"*%d\r\n" % (len(head) + 2 * len(watched)), *(_bulk(word) for word in head)]
        parts.extend(w.packed_key for w in watched)
        parts.extend(w.packed_id for w in watched)
        return b"".join(parts)

    async def _read_loop(self, conn: Connection) -> None:
        while True:
            if not self._keys:
                self._changed.clear()
                await self._changed.wait()
            command = self._packed_xread()
            self.stats.watched_keys = len(self._keys)
            self._dirty = False
            self._blocked = True
            try:
                await conn.send_packed_command(command)
                response = await conn.read_response(disable_decoding=True)
            finally:
                self._blocked = False
            read_at = time.monotonic()
            self.stats.reads += 1
            if not response:
                continue
            for raw_key, raw_entries in _by_key(response):
                watched = self._keys.get(raw_key.decode())
                if watched is None:
                    continue
                for raw_id, raw_fields in raw_entries:
                    entry = _parse_raw_entry(raw_id, raw_fields)
                    if entry.seq <= watched.read_seq:
                        continue
                    self.stats.entries += 1
                    for sub in watched.subscribers:
                        sub.offer(entry)
                    watched.advance(entry.seq)
            # Batching that grows with the number of keys each XREAD names (its cost does too).
            pause = min(self.max_pause_s, self.per_key_pause_s * len(self._keys)) - (time.monotonic() - read_at)
            if pause > 0.001 and not self._dirty:
                await asyncio.sleep(pause)


def _by_key(response: object) -> list[tuple[bytes, list[tuple[bytes, list[bytes]]]]]:
    """XREAD answers a list of ``[key, entries]`` under RESP2 and a dict under RESP3."""
    if isinstance(response, dict):
        return list(response.items())
    return [(key, entries) for key, entries in response]  # type: ignore[attr-defined]


class ShardedRelay:
    """Several :class:`StreamRelay` readers behind one relay's interface, each owning the runs whose id is
    ``i`` modulo their number: each reader's ``XREAD`` names a share of the keys, and their round trips overlap
    instead of queueing behind one connection (a single reader over 2,000 streams managed ~7 reads a second)."""

    def __init__(self, redis_url: str, *, readers: int) -> None:
        if readers < 1:
            raise ValueError(f"a relay needs at least one reader, not {readers}")
        self.readers = [StreamRelay(redis_url) for _ in range(readers)]

    def reader(self, run_id: int) -> StreamRelay:
        return self.readers[run_id % len(self.readers)]

    async def read_after(self, run_id: int, after_seq: int) -> tuple[list[StreamEntry], StreamEntry | None]:
        return await self.reader(run_id).read_after(run_id, after_seq)

    async def subscribe(self, run_id: int, cursor: int) -> tuple[Subscription, list[StreamEntry]]:
        return await self.reader(run_id).subscribe(run_id, cursor)

    def unsubscribe(self, sub: Subscription) -> None:
        self.reader(sub.run_id).unsubscribe(sub)

    async def aclose(self) -> None:
        for reader in self.readers:
            await reader.aclose()


Relay = StreamRelay | ShardedRelay
"""What the SSE and OpenAI streams read through: one reader (tests) or the process's sharded relay."""

_relays: dict[int, ShardedRelay] = {}


def get_relay() -> ShardedRelay:
    """The relay of the running event loop (one per process under uvicorn; tests may run several loops), with
    ``STREAM_RELAY_READERS`` readers."""
    loop = asyncio.get_running_loop()
    relay = _relays.get(id(loop))
    if relay is None:
        relay = ShardedRelay(settings.REDIS_URL, readers=settings.STREAMS.relay_readers)
        _relays.clear()  # a new loop means the old one is gone (there is only one in a server process)
        _relays[id(loop)] = relay
    return relay


def is_terminal(entry: Entry) -> bool:
    return entry.event in TERMINAL_EVENTS
