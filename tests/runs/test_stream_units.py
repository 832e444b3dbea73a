"""The streaming pieces in-process: adaptive flush interval, the relay's join/catch-up, coalescing, the
Postgres fallback, SSE framing identical to django-eventstream's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
import redis
from django.conf import settings
from django.test import RequestFactory
from django.utils import timezone
from django_eventstream.utils import sse_encode_event

from chats.models import Message, MessageRole
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import (
    ACTIVE_STALE_S,
    RunStreamWriter,
    StreamEntry,
    StreamEvent,
    active_streams_key,
    append_to_many,
    read_after,
    stream_key,
)
from runs.streaming.follow import coalesce, final_state_entries
from runs.streaming.load import count_active_streams, flush_interval_for
from runs.streaming.relay import Entry, RawEntry, ShardedRelay, StreamRelay, Subscription
from runs.streaming.sse import encode, encode_entry
from runs.streaming.views import MAX_EVENT_ID, parse_last_event_id
from tests.factories import RunFactory


def run_on_own_loop(coro: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` on a fresh thread: this thread may already carry a loop (Playwright's sync API keeps one)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, coro).result()


def test_flush_interval_grows_with_active_streams_within_bounds() -> None:
    cfg = settings.STREAMS
    assert flush_interval_for(0) == flush_interval_for(1) == cfg.flush_interval_s
    small, mid, large = flush_interval_for(300), flush_interval_for(1000), flush_interval_for(2000)
    assert cfg.flush_interval_s < small < mid < large <= cfg.max_flush_interval_s
    assert flush_interval_for(10**6) == cfg.max_flush_interval_s
    # Near the budget: active / interval ~ events per second.
    assert 1000 / mid == pytest.approx(cfg.event_budget_per_s)


def test_writers_register_in_the_active_set_until_their_terminal_event(clean_redis: redis.Redis) -> None:
    first, second = RunStreamWriter(1), RunStreamWriter(2)
    first.append(StreamEvent.DELTA, {"text": "a"})
    second.append(StreamEvent.DELTA, {"text": "b"})
    assert count_active_streams() == 2
    assert clean_redis.ttl(stream_key(1)) > 0
    first.append(StreamEvent.DONE, {"finish_reason": "stop"})
    assert count_active_streams() == 1
    assert clean_redis.ttl(stream_key(1)) <= settings.STREAMS.done_ttl_s
    # A crashed worker's run stops counting once its entry is stale.
    clean_redis.zadd(active_streams_key(), {"2": time.time() - ACTIVE_STALE_S - 1})
    assert count_active_streams() == 0


def test_append_to_many_numbers_each_stream_after_its_last_entry_in_two_round_trips(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    RunStreamWriter(11).append(StreamEvent.STATUS, {"status": "queued", "queue_position": 3})
    RunStreamWriter(11).append(StreamEvent.STATUS, {"status": "queued", "queue_position": 2})
    executed: list[int] = []
    real_execute = redis.client.Pipeline.execute

    def counting(pipe: redis.client.Pipeline, raise_on_error: bool = True) -> list[Any]:
        executed.append(len(pipe.command_stack))
        return real_execute(pipe, raise_on_error)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting)
    events = [
        (run_id, StreamEvent.STATUS, {"status": "queued", "queue_position": p}) for run_id, p in ((11, 1), (12, 4))
    ]
    assert append_to_many(events, client=clean_redis) == 0
    assert len(executed) == 2  # the last ids, then every append: not two round trips a run
    assert [(e.seq, e.data["queue_position"]) for e in read_after(11, 0)] == [(1, 3), (2, 2), (3, 1)]
    assert [(e.seq, e.data["queue_position"]) for e in read_after(12, 0)] == [(1, 4)]
    assert count_active_streams() == 2  # as RunStreamWriter.append: the TTL and the active set with the first


def test_append_to_many_skips_a_stream_whose_next_id_was_taken_meanwhile(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 21 was dispatched between the read of its last id and the append: its worker wrote id 1 first."""
    real_queue = RunStreamWriter.queue
    raced: list[int] = []

    def worker_first(writer: RunStreamWriter, pipe: redis.client.Pipeline, event: StreamEvent, data: dict) -> int:  # type: ignore[type-arg]
        if writer.run_id == 21 and not raced:
            raced.append(21)
            RunStreamWriter(21, client=clean_redis).append(StreamEvent.DELTA, {"text": "Hi"})
        return real_queue(writer, pipe, event, data)

    monkeypatch.setattr(RunStreamWriter, "queue", worker_first)
    events = [(run_id, StreamEvent.STATUS, {"status": "queued", "queue_position": 1}) for run_id in (21, 22)]
    assert append_to_many(events, client=clean_redis) == 1
    assert [(e.seq, e.event) for e in read_after(21, 0)] == [(1, StreamEvent.DELTA)]  # the worker's entry stands
    assert [(e.seq, e.event) for e in read_after(22, 0)] == [(1, StreamEvent.STATUS)]


def test_coalesce_merges_consecutive_deltas_and_keeps_the_last_id() -> None:
    entries = [
        StreamEntry(1, StreamEvent.STATUS, {"status": "streaming"}),
        StreamEntry(2, StreamEvent.DELTA, {"text": "He", "t": 1.0}),
        StreamEntry(3, StreamEvent.DELTA, {"text": "llo", "t": 2.0}),
        StreamEntry(4, StreamEvent.RESET, {}),
        StreamEntry(5, StreamEvent.DELTA, {"text": "Hi"}),
        StreamEntry(6, StreamEvent.DONE, {}),
    ]
    merged = coalesce(entries)
    assert [(e.seq, e.event) for e in merged] == [(1, "status"), (3, "delta"), (4, "reset"), (5, "delta"), (6, "done")]
    assert merged[1].data == {"text": "Hello", "t": 1.0}


@pytest.mark.django_db
def test_final_state_from_postgres() -> None:
    run = cast(
        Run, RunFactory.create(status=RunStatus.DONE, finish_reason=FinishReason.STOP, input_tokens=3, output_tokens=2)
    )
    run.assistant_message = Message.objects.create(chat=run.chat, role=MessageRole.ASSISTANT, content="Hi there")
    run.save()
    fresh = final_state_entries(run, after_seq=0)
    assert [(e.seq, e.event) for e in fresh] == [(1, "delta"), (2, "done")]
    assert fresh[0].data == {"text": "Hi there"}
    assert fresh[1].data["usage"] == {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    resumed = final_state_entries(run, after_seq=7)
    assert [(e.seq, e.event) for e in resumed] == [(8, "reset"), (9, "delta"), (10, "done")]
    failed = cast(Run, RunFactory.create(status=RunStatus.FAILED, error="engine exploded", finished_at=timezone.now()))
    assert [(e.event, e.data) for e in final_state_entries(failed, after_seq=0)] == [
        ("error", {"code": "generation_failed", "message": "engine exploded"})
    ]


@pytest.mark.parametrize(
    ("event", "data", "seq"),
    [
        (StreamEvent.DELTA, {"text": "héllo\nwörld \u2028", "tokens": 3}, 7),
        (StreamEvent.STATUS, {"status": RunStatus.QUEUED, "queue_position": 2}, None),
        (StreamEvent.DONE, {"message_id": 5, "finish_reason": FinishReason.STOP, "usage": {}}, 12),
    ],
)
def test_sse_framing_is_django_eventstreams_byte_for_byte(
    event: StreamEvent, data: dict[str, Any], seq: int | None
) -> None:
    """The run streams are framed by hand (no per-event regex work), exactly as django-eventstream frames them."""
    body = json.dumps(data, separators=(",", ":"))
    expected = sse_encode_event(event.value, body, event_id=seq).encode()
    assert encode(event, data, seq) == expected
    if seq is not None:
        raw = RawEntry(seq, event, body.encode())
        assert encode_entry(raw) == expected


@pytest.mark.parametrize(
    ("header", "query", "expected"),
    [("", "", 0), ("12", "", 12), ("", "7", 7), ("run-3:9", "", 9), ("run-3%3A:4", "", 4), ("5", "8", 5)],
)
def test_last_event_id_forms(header: str, query: str, expected: int) -> None:
    headers = {"Last-Event-ID": header} if header else {}
    request = RequestFactory().get("/api/runs/3/stream", {"lastEventId": query} if query else {}, headers=headers)
    assert parse_last_event_id(request) == expected


def test_last_event_id_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_last_event_id(RequestFactory().get("/x", HTTP_LAST_EVENT_ID="abc"))


@pytest.mark.parametrize(
    ("header", "query"),
    [
        ("99999999999999999999999", ""),  # was a 500: Redis refused the id ("Invalid stream ID")
        (str(2**63), ""),
        ("run-3:99999999999999999999999", ""),
        ("", "99999999999999999999999"),
        ("9" * 5000, ""),  # longer than Python converts to int
        ("\u0661", ""),  # a Unicode digit (Arabic-Indic one): ids are ASCII
        ("-1", ""),
    ],
)
def test_last_event_id_out_of_range_is_refused(header: str, query: str) -> None:
    headers = {"Last-Event-ID": header} if header else {}
    request = RequestFactory().get("/api/runs/3/stream", {"lastEventId": query} if query else {}, headers=headers)
    with pytest.raises(ValueError):
        parse_last_event_id(request)


def test_the_largest_last_event_id_is_accepted() -> None:
    assert parse_last_event_id(RequestFactory().get("/x", HTTP_LAST_EVENT_ID=str(MAX_EVENT_ID))) == 2**63 - 1


async def _collect(sub: Subscription, until_seq: int) -> list[int]:
    seqs: list[int] = []
    while not seqs or seqs[-1] < until_seq:
        batch = await sub.next_batch(2.0)
        assert batch, f"nothing arrived after {seqs}"
        seqs += [e.seq for e in batch]
    return seqs


def test_relay_late_joiner_behind_the_reader_gets_every_entry_once(clean_redis: redis.Redis) -> None:
    """A second client joins the same run with an old cursor while the reader is already further on."""

    async def scenario() -> None:
        relay = StreamRelay(settings.REDIS_URL)
        writer = RunStreamWriter(41)
        try:
            for i in range(5):
                writer.append(StreamEvent.DELTA, {"text": str(i)})
            early, catch_up = await relay.subscribe(41, 0)
            assert catch_up == []
            assert await _collect(early, 5) == [1, 2, 3, 4, 5]
            for i in range(5, 10):
                writer.append(StreamEvent.DELTA, {"text": str(i)})
            assert await _collect(early, 10) == [6, 7, 8, 9, 10]
            late, catch_up = await relay.subscribe(41, 2)
            assert [e.seq for e in catch_up] == list(range(3, 11))
            writer.append(StreamEvent.DELTA, {"text": "x"})
            writer.append(StreamEvent.DONE, {})
            assert await _collect(late, 12) == [11, 12]
            assert await _collect(early, 12) == [11, 12]
            relay.unsubscribe(early)
            relay.unsubscribe(late)
            assert relay.stats.watched_keys <= 1 and not relay._keys
            # A new key joins while the reader blocks on nothing: CLIENT UNBLOCK wakes it.
            other, _ = await relay.subscribe(42, 0)
            await asyncio.sleep(0.05)
            started = time.monotonic()
            RunStreamWriter(42).append(StreamEvent.DELTA, {"text": "now"})
            assert await _collect(other, 1) == [1]
            assert time.monotonic() - started < 1.0
        finally:
            await relay.aclose()

    run_on_own_loop(scenario())


def test_a_sharded_relay_gives_each_reader_its_share_of_the_runs_and_every_client_its_own_entries(
    clean_redis: redis.Redis,
) -> None:
    async def scenario() -> None:
        relay = ShardedRelay(settings.REDIS_URL, readers=3)
        try:
            run_ids = list(range(500, 530))
            subs = {run_id: (await relay.subscribe(run_id, 0))[0] for run_id in run_ids}
            for index, reader in enumerate(relay.readers):  # each reader watches only the runs it owns
                assert {int(key.split(":")[1]) for key in reader._keys} == {r for r in run_ids if r % 3 == index}
            writers = [RunStreamWriter(run_id) for run_id in run_ids]
            pipe = clean_redis.pipeline(transaction=False)
            for round_ in range(2):
                for writer in writers:
                    writer.queue(pipe, StreamEvent.DELTA, {"text": f"{writer.run_id}:{round_}"})
            pipe.execute()
            for run_id, sub in subs.items():
                assert [e.data["text"] for e in await _take(sub, 2)] == [f"{run_id}:0", f"{run_id}:1"]
            late, catch_up = await relay.subscribe(run_ids[0], 1)  # joins behind its reader: caught up once
            assert [e.seq for e in catch_up] == [2]
            entries, last = await relay.read_after(run_ids[1], 0)
            assert [e.seq for e in entries] == [1, 2] and last is not None and last.seq == 2
            for sub in [*subs.values(), late]:
                relay.unsubscribe(sub)
            assert not any(reader._keys for reader in relay.readers)
        finally:
            await relay.aclose()

    run_on_own_loop(scenario())
    with pytest.raises(ValueError, match="at least one reader"):
        ShardedRelay(settings.REDIS_URL, readers=0)


async def _take(sub: Subscription, count: int) -> list[Entry]:
    batch: list[Entry] = []
    while len(batch) < count:
        got = await sub.next_batch(2.0)
        assert got, f"only {len(batch)} of {count} entries arrived"
        batch += got
    return batch


def test_relay_many_keys_one_reader(clean_redis: redis.Redis) -> None:
    """300 runs, written interleaved, through one reader: each subscription sees exactly its own entries."""

    async def scenario() -> None:
        relay = StreamRelay(settings.REDIS_URL)
        try:
            subs = [(await relay.subscribe(run_id, 0))[0] for run_id in range(100, 400)]
            writers = [RunStreamWriter(run_id) for run_id in range(100, 400)]
            pipe = clean_redis.pipeline(transaction=False)
            for round_ in range(3):
                for writer in writers:
                    writer.queue(pipe, StreamEvent.DELTA, {"text": f"{writer.run_id}:{round_}"})
            pipe.execute()
            for sub in subs:
                batch: list[Entry] = []
                while len(batch) < 3:
                    got = await sub.next_batch(2.0)
                    assert got
                    batch += got
                assert [e.data["text"] for e in batch] == [f"{sub.run_id}:{r}" for r in range(3)]
            assert relay.stats.reads < 50
        finally:
            await relay.aclose()

    run_on_own_loop(scenario())
