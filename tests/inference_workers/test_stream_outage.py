"""A worker's stream across a Redis outage (a restart): the coalescer buffers, then writes every text once.

``bench/fault_suite.py`` restarts a real Redis under a real stack; these are the same cases one at a time:
appends that fail before Redis applied them, appends that Redis applied but whose reply was lost, entries
Redis came back without, the lease lost meanwhile, an outage longer than the limit. Also the SSE side: a
status read that fails while Postgres restarts does not end a stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings

from inference_workers.coalescer import IDLE_WAIT_S, DeltaCoalescer, StreamLost
from runs.streaming.batch import PipelineBatcher
from runs.streaming.contract import RunStreamWriter, StreamEvent, read_after, stream_key
from runs.streaming.follow import GONE_ITEM, OpenedStream, StreamItem, iter_run_items
from runs.streaming.relay import StreamRelay
from tests.runs.test_stream_units import run_on_own_loop


class FlakyRedis:
    """A Redis client whose pipelines fail ``down`` times: before Redis saw them, or (``applied``) after Redis
    applied them, the reply lost. Everything else goes to the real client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.down = 0
        self.applied = False

    def pipeline(self, transaction: bool = False) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        execute = pipe.execute

        def flaky_execute(raise_on_error: bool = True) -> Any:
            self.before_execute(pipe)
            if self.down > 0:
                self.down -= 1
                if self.applied:
                    execute(raise_on_error=raise_on_error)
                raise redis.ConnectionError("Connection closed by server.")
            return execute(raise_on_error=raise_on_error)

        pipe.execute = flaky_execute  # type: ignore[method-assign,assignment]
        return pipe

    def before_execute(self, pipe: redis.client.Pipeline) -> None:
        """What a subclass does as a pipeline is sent (before the failure, if any)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.fixture(params=["direct", "batched"])
def batcher(request: pytest.FixtureRequest) -> PipelineBatcher | None:
    """A case twice: each append a pipeline of its own, and appends through a batcher's shared pipeline
    (``STREAM_BATCHED_WRITES``)."""
    return PipelineBatcher() if request.param == "batched" else None


def _coalescer(
    flaky: FlakyRedis,
    run_id: int,
    batcher: PipelineBatcher | None,
    *,
    owns: Callable[[], bool] = lambda: True,
    limit: float = 10.0,
) -> DeltaCoalescer:
    writer = RunStreamWriter(run_id, client=flaky, batcher=batcher)  # type: ignore[arg-type]
    return DeltaCoalescer(writer, interval_s=lambda: 0.0, max_tokens=1, owns=owns, outage_limit_s=limit, retry_s=0.0)


def _text(run_id: int) -> str:
    text = ""
    for entry in read_after(run_id, 0):
        if entry.event == StreamEvent.RESET:
            text = ""
        elif entry.event == StreamEvent.DELTA:
            text += entry.data["text"]
    return text


def test_an_outage_buffers_the_text_and_writes_it_once_redis_answers(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    coalescer = _coalescer(flaky, 7, batcher)
    coalescer.add("a", 1)
    coalescer.settle()  # "a" is in the stream (a batching writer's append is read at the next flush)
    flaky.down = 3
    for word in (" b", " c", " d", " e"):  # three fail; the fourth goes out with everything buffered
        coalescer.add(word, 1)
    coalescer.drain()
    entries = read_after(7, 0)
    assert [(e.seq, e.data["text"]) for e in entries] == [(1, "a"), (2, " b c d e")]
    assert [e.data["tokens"] for e in entries] == [1, 4]
    assert clean_redis.ttl(stream_key(7)) > 0


def test_an_append_redis_applied_but_did_not_acknowledge_is_not_sent_again(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    coalescer = _coalescer(flaky, 8, batcher)
    coalescer.add("a", 1)
    coalescer.settle()
    flaky.down, flaky.applied = 1, True
    coalescer.add(" b", 1)  # in the stream, but the worker saw an error
    coalescer.add(" c", 1)
    coalescer.drain()
    assert [(e.seq, e.data["text"]) for e in read_after(8, 0)] == [(1, "a"), (2, " b"), (3, " c")]
    assert _text(8) == coalescer.text == "a b c"


def test_entries_redis_came_back_without_are_sent_again_after_a_reset(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    coalescer = _coalescer(flaky, 9, batcher)
    coalescer.add("a", 1)
    coalescer.add(" b", 1)
    coalescer.settle()
    clean_redis.xdel(stream_key(9), "0-2")  # acknowledged, then lost (a crash before the append-only file sync)
    flaky.down = 1
    coalescer.add(" c", 1)
    coalescer.add(" d", 1)
    coalescer.drain()
    entries = read_after(9, 0)
    assert [e.event for e in entries] == [StreamEvent.DELTA, StreamEvent.RESET, StreamEvent.DELTA]
    assert [e.seq for e in entries] == [1, 3, 4]  # ids go on after every id a client may have seen
    assert _text(9) == "a b c d"
    assert entries[-1].data["tokens"] == 4


def test_entries_lost_without_an_error_seen_are_found_by_the_next_append_and_sent_again(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    """redis-py's retries may reconnect an append to a restarted Redis or a promoted replica without the caller
    seeing an error: the append itself finds the entries missing before its own and the text goes out again."""
    coalescer = _coalescer(FlakyRedis(clean_redis), 10, batcher)
    coalescer.add("a", 1)
    coalescer.add(" b", 1)
    coalescer.settle()
    clean_redis.xdel(stream_key(10), "0-2")  # gone with no failed append: the writer has seen nothing
    coalescer.add(" c", 1)
    coalescer.drain()
    entries = read_after(10, 0)
    assert [e.event for e in entries] == [StreamEvent.DELTA, StreamEvent.DELTA, StreamEvent.RESET, StreamEvent.DELTA]
    assert [e.seq for e in entries] == [1, 3, 4, 5]
    assert _text(10) == "a b c"
    assert coalescer.writer.gap is None


def test_a_resend_after_lost_entries_keeps_every_tokens_logprobs(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    writer = RunStreamWriter(12, client=flaky, batcher=batcher)  # type: ignore[arg-type]
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 0.0, max_tokens=1, retry_s=0.0, logprobs=True)

    def lp(token: str) -> list[dict[str, Any]]:
        return [{"token": token, "logprob": -1.0, "bytes": list(token.encode()), "top_logprobs": []}]

    coalescer.add("a", 1, lp("a"))
    coalescer.add(" b", 1, lp(" b"))
    coalescer.settle()
    clean_redis.xdel(stream_key(12), "0-2")
    flaky.down = 1
    coalescer.add(" c", 1, lp(" c"))
    coalescer.add(" d", 1, lp(" d"))
    coalescer.drain()
    entries = read_after(12, 0)
    assert [e.event for e in entries] == [StreamEvent.DELTA, StreamEvent.RESET, StreamEvent.DELTA]
    resent = entries[-1].data
    assert resent["text"] == "a b c d" and resent["tokens"] == 4
    assert [e["token"] for e in resent["logprobs"]] == ["a", " b", " c", " d"]


def test_the_attempt_stops_when_it_lost_the_lease_during_the_outage(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    coalescer = _coalescer(flaky, 10, batcher, owns=lambda: False)
    coalescer.add("a", 1)
    coalescer.settle()
    flaky.down = 1
    coalescer.add(" b", 1)
    with pytest.raises(StreamLost, match="lease"):
        coalescer.add(" c", 1)
    assert _text(10) == "a"  # nothing written after the run may have become another attempt's


def test_an_outage_longer_than_the_limit_stops_the_attempt(
    clean_redis: redis.Redis, batcher: PipelineBatcher | None
) -> None:
    flaky = FlakyRedis(clean_redis)
    coalescer = _coalescer(flaky, 11, batcher, limit=0.0)
    coalescer.add("a", 1)
    coalescer.settle()
    flaky.down = 1000
    coalescer.add(" b", 1)  # the first failure starts the clock
    with pytest.raises(StreamLost, match="unreachable"):
        coalescer.drain()


def test_a_failed_status_read_does_not_end_the_stream(
    clean_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Postgres restarts the status polls fail: the stream goes on (it used to end "run gone")."""
    monkeypatch.setattr(settings, "STREAMS", dataclasses.replace(settings.STREAMS, status_poll_s=0.05))

    class Failing:
        calls = 0

        async def status(self, run_id: int) -> str | None:
            Failing.calls += 1
            raise ConnectionError("Postgres is restarting")

    monkeypatch.setattr("runs.streaming.follow.get_status_reader", lambda: Failing())

    async def scenario() -> list[StreamItem]:
        relay = StreamRelay(settings.REDIS_URL)
        writer = RunStreamWriter(12)
        writer.append(StreamEvent.STATUS, {"status": "streaming"})
        opened = OpenedStream(first=[], live=True, initial_status=None)
        items: list[StreamItem] = []

        async def follow() -> None:
            async for item in iter_run_items(run_id=12, after_seq=1, opened=opened, relay=relay, end_on_drain=False):
                items.append(item)

        task = asyncio.get_running_loop().create_task(follow())
        try:
            while Failing.calls < 3:
                await asyncio.sleep(0.02)
            writer.append(StreamEvent.DELTA, {"text": "still here"})
            writer.append(StreamEvent.DONE, {})
            await asyncio.wait_for(task, timeout=5)
        finally:
            await relay.aclose()
        return items

    result: list[list[StreamItem]] = []
    run_on_own_loop(_capture(scenario(), result))
    items = result[0]
    assert GONE_ITEM not in items
    assert [e.event for item in items for e in item.entries] == [StreamEvent.DELTA, StreamEvent.DONE]


async def _capture(coro: Any, into: list[Any]) -> None:
    into.append(await coro)


def test_the_generation_loop_sleeps_until_a_flush_is_due_and_not_in_a_spin_while_redis_is_out(
    clean_redis: redis.Redis,
) -> None:
    flaky = FlakyRedis(clean_redis)
    writer = RunStreamWriter(12, client=flaky)  # type: ignore[arg-type]
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 0.2, max_tokens=16, retry_s=0.3)
    assert coalescer.wait_s() == IDLE_WAIT_S  # nothing buffered: only the cancel repeat needs a look
    coalescer.add("a", 1)  # the first token goes at once
    assert coalescer.wait_s() == IDLE_WAIT_S
    coalescer.add(" b", 1)  # buffered: due one interval after the last flush
    assert 0.1 < coalescer.wait_s() <= 0.2
    flaky.down = 1
    coalescer.flush()  # fails: the next try is retry_s away, later than the interval
    assert 0.25 < coalescer.wait_s() <= 0.3
    coalescer.drain()
    assert _text(12) == "a b" and coalescer.wait_s() == IDLE_WAIT_S


def test_the_generation_loop_may_hold_new_deltas_until_the_next_flush_and_no_longer(clean_redis: redis.Redis) -> None:
    flaky = FlakyRedis(clean_redis)
    writer = RunStreamWriter(13, client=flaky)  # type: ignore[arg-type]
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 0.2, max_tokens=16, retry_s=0.3)
    assert coalescer.hold_s() == 0.0  # the first token is taken (and written) at once
    coalescer.add("a", 1)
    assert 0.1 < coalescer.hold_s() <= 0.2  # written just now: the next flush is an interval away
    coalescer.add(" b", 1)
    flaky.down = 1
    coalescer.last_flush -= 0.2  # due now: the flush fails, the next try is retry_s away
    coalescer.flush()
    assert 0.25 < coalescer.hold_s() <= 0.3
    coalescer.drain()
    assert _text(13) == "a b"
