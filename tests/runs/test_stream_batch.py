"""The process's batching stream writer (``runs.streaming.batch.PipelineBatcher``, ``STREAM_BATCHED_WRITES``):
many threads' appends go out in one pipeline per tick, each caller gets its own replies or error, and a pipeline
that fails fails every caller in it, who tries again without losing or repeating text."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import pytest
import redis

from inference_workers.coalescer import DeltaCoalescer
from runs.streaming.batch import Command, PipelineBatcher
from runs.streaming.contract import RunStreamWriter, StreamEvent, read_after, stream_key
from tests.inference_workers.test_stream_outage import FlakyRedis

THREADS = 40


class GatedRedis(FlakyRedis):
    """A :class:`FlakyRedis` whose pipelines are recorded (the commands of each ``execute``) and can be held: while
    ``gate`` is clear, an ``execute`` waits for it (the writer thread busy with a pipeline on the wire, so that
    the next callers pile up for one tick)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.gate = threading.Event()
        self.gate.set()
        self.executes: list[int] = []
        """The number of commands of each pipeline sent."""
        self.held = 0
        """Executes that have waited at the gate."""

    def before_execute(self, pipe: redis.client.Pipeline) -> None:
        if not self.gate.is_set():
            self.held += 1
        assert self.gate.wait(10)
        self.executes.append(len(pipe.command_stack))


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _pending(batcher: PipelineBatcher) -> int:
    return len(batcher._pending)


def _in_one_tick(gated: GatedRedis, batcher: PipelineBatcher, calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Runs ``calls`` in threads of their own, all queued while the writer is held on a pipeline already sent (a
    lone ``PING``), so that they go out in the next one; returns each call's result or the exception it raised."""
    gated.gate.clear()
    held, sent = gated.held, len(gated.executes)

    def ping() -> None:
        try:
            batcher.execute(gated, [(("PING",), {})])  # type: ignore[arg-type]
        except redis.ConnectionError:  # a case where Redis stops answering: it may be the first to see it
            pass

    blocker = threading.Thread(target=ping)
    blocker.start()
    _wait_for(lambda: gated.held == held + 1)  # the writer has sent the PING's pipeline and waits at the gate
    results: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the call's outcome, checked by the test
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    _wait_for(lambda: _pending(batcher) == len(calls))
    gated.gate.set()
    for thread in [*threads, blocker]:
        thread.join(10)
    assert gated.executes[sent:] == [1, gated.executes[-1]]  # the PING's pipeline, then one for every call
    return results


def test_many_threads_appends_go_out_in_one_pipeline_and_each_gets_its_own_reply(clean_redis: redis.Redis) -> None:
    gated, batcher = GatedRedis(clean_redis), PipelineBatcher()
    for i in range(THREADS):  # streams of different lengths: each append's id says whose reply it got
        clean_redis.xadd(stream_key(i), {"event": "status", "data": "{}"}, id=f"0-{i + 1}")
    writers = [RunStreamWriter(i, client=gated, batcher=batcher) for i in range(THREADS)]  # type: ignore[arg-type]
    calls = [partial(w.append, StreamEvent.DELTA, {"text": f"run {w.run_id}", "tokens": 1}) for w in writers]
    results = _in_one_tick(gated, batcher, calls)
    assert results == [i + 2 for i in range(THREADS)]
    # The PING alone, then every append's commands (XREVRANGE, XADD, EXPIRE, ZADD) in one pipeline.
    assert gated.executes == [1, 4 * THREADS]
    assert batcher.pipelines == 2 and batcher.submissions == THREADS + 1
    for writer in writers:
        assert writer.gap is None
        entries = read_after(writer.run_id, 0)
        assert [(e.seq, e.data.get("text")) for e in entries][-1] == (writer.run_id + 2, f"run {writer.run_id}")


def test_a_command_that_fails_fails_only_its_caller(clean_redis: redis.Redis) -> None:
    gated, batcher = GatedRedis(clean_redis), PipelineBatcher()
    clean_redis.set("text", "not a number")
    commands: list[list[Command]] = [[(("INCRBY", f"n{i}", i), {})] for i in range(THREADS)]
    commands[7] = [(("INCRBY", "n7", 7), {}), (("INCR", "text"), {})]  # its second command fails
    client = cast(redis.Redis, gated)
    results = _in_one_tick(gated, batcher, [partial(batcher.execute, client, c) for c in commands])
    assert isinstance(results[7], redis.ResponseError)
    assert [r for i, r in enumerate(results) if i != 7] == [[i] for i in range(THREADS) if i != 7]
    assert gated.executes == [1, THREADS + 1]
    assert clean_redis.get("n7") == "7"  # as in a pipeline of its own: the commands before the error are applied


@pytest.mark.parametrize("applied", [False, True], ids=["lost", "applied-reply-lost"])
def test_a_pipeline_that_fails_fails_every_caller_in_it_and_each_writes_its_text_once(
    clean_redis: redis.Redis, applied: bool
) -> None:
    """Redis stops answering while a tick's pipeline is on the wire (before it applied it, or after with the reply
    lost): every coalescer in it sees the error, keeps its text, and writes it once when Redis answers."""
    gated, batcher = GatedRedis(clean_redis), PipelineBatcher()
    coalescers = [
        DeltaCoalescer(
            RunStreamWriter(100 + i, client=gated, batcher=batcher),  # type: ignore[arg-type]
            interval_s=lambda: 0.0,
            max_tokens=1,
            retry_s=0.0,
        )
        for i in range(THREADS)
    ]
    for coalescer in coalescers:
        coalescer.add("a", 1)
        coalescer.settle()
    gated.down, gated.applied = 2, applied  # the pipeline that holds the writer, then the tick's

    def add_b(c: DeltaCoalescer) -> None:
        c.add(" b", 1)  # sent without waiting for the reply,
        c.settle()  # which this reads

    _in_one_tick(gated, batcher, [partial(add_b, c) for c in coalescers])
    assert gated.executes[-1] == 2 * THREADS  # one pipeline: XREVRANGE and XADD for each run
    assert all(c._down_since is not None and c.parts for c in coalescers)  # each one saw the error

    def finish(c: DeltaCoalescer) -> None:
        c.add(" c", 1)
        c.drain()

    threads = [threading.Thread(target=finish, args=(c,)) for c in coalescers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for coalescer in coalescers:
        entries = read_after(coalescer.writer.run_id, 0)
        assert [e.event for e in entries] == [StreamEvent.DELTA] * len(entries)
        assert "".join(e.data["text"] for e in entries) == coalescer.text == "a b c"
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert coalescer._down_since is None and not coalescer.parts


def test_the_writer_thread_goes_on_after_a_failed_pipeline(clean_redis: redis.Redis) -> None:
    gated, batcher = GatedRedis(clean_redis), PipelineBatcher()
    gated.down = 1
    with pytest.raises(redis.ConnectionError):
        batcher.execute(gated, [(("PING",), {})])  # type: ignore[arg-type]
    assert batcher.execute(gated, [(("INCR", "n"), {})]) == [1]  # type: ignore[arg-type]


def test_a_flush_does_not_wait_for_the_reply_and_the_next_flush_reads_it(clean_redis: redis.Redis) -> None:
    """Through a batcher a coalescer's append is sent and not waited for (a task thread wakes once a flush): the
    thread goes on while the pipeline is on the wire, and its next flush reads the outcome. A failed append's text
    goes out again, ahead of the newer text, once; the ids stay gapless."""
    gated, batcher = GatedRedis(clean_redis), PipelineBatcher()
    coalescer = DeltaCoalescer(
        RunStreamWriter(300, client=gated, batcher=batcher),  # type: ignore[arg-type]
        interval_s=lambda: 0.0,
        max_tokens=1,
        retry_s=0.0,
    )
    gated.gate.clear()
    coalescer.add("a", 1)  # returns with its pipeline held at the gate
    _wait_for(lambda: gated.held == 1)
    assert read_after(300, 0) == [] and coalescer._sent is not None
    gated.gate.set()
    coalescer.settle()
    assert [(e.seq, e.data["text"]) for e in read_after(300, 0)] == [(1, "a")]

    gated.down = 1
    coalescer.add(" b", 1)  # fails on the wire; nobody waits for it
    _wait_for(lambda: coalescer._sent is not None and coalescer._sent.pending.done)
    coalescer.add(" c", 1)  # reads the failure, then sends " b" again with " c"
    coalescer.drain()
    assert [(e.seq, e.data["text"]) for e in read_after(300, 0)] == [(1, "a"), (2, " b c")]
    assert coalescer.flushes == 2 and coalescer._down_since is None
