"""The worker's generate path on the simulated engine: streaming, finishing, cancel, redelivery, failures.

Continuation after a dead or draining worker in depth: ``test_continuation.py``."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest
import redis
from django.conf import settings

from chats.models import Message, MessageRole
from generation.worker_contract import cancel_key, worker_heartbeats
from inference_workers.coalescer import DeltaCoalescer
from inference_workers.engine.base import GenerationRequest
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.models import FinishReason, Recovery, Run, RunStatus
from runs.services import run_cancel
from runs.streaming.contract import RunStreamWriter, StreamEvent
from tests.factories import RunFactory
from tests.inference_workers.conftest import stream_of, text_after_last_reset, wait_for
from tests.inference_workers.list_writer import ListWriter, Written

# Transactional: a run's end (its refund, its terminal stream event) takes effect when its transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)


def test_run_streams_deltas_and_ends_done_with_one_assistant_message(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=64, priority=2)

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert run.finish_reason == FinishReason.STOP
    assert run.attempts == 1 and run.worker == "sim@test"
    assert run.started_at and run.first_token_at and run.finished_at
    assert run.output_tokens == 12 and run.input_tokens > 0
    assert (run.recovery, run.resumed_tokens) == (Recovery.NONE, 0)  # a first attempt recovers from nothing
    assert run.assistant_message is not None
    assert run.assistant_message.role == MessageRole.ASSISTANT
    entries = stream_of(run)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert entries[0].event == StreamEvent.STATUS
    assert run.assistant_message.content == text_after_last_reset(entries) != ""
    assert entries[-1].event == StreamEvent.DONE
    assert entries[-1].data == {
        "message_id": run.assistant_message.pk,
        "finish_reason": "stop",
        "usage": {"input_tokens": run.input_tokens, "output_tokens": 12, "total_tokens": run.input_tokens + 12},
        "status": "done",
    }
    assert sum(e.data["tokens"] for e in entries if e.event == StreamEvent.DELTA) == 12


def test_max_tokens_ends_with_length(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=5)
    generate_run(run_id=run.pk, runtime=sim_runtime)
    run.refresh_from_db()
    assert (run.status, run.finish_reason, run.output_tokens) == (RunStatus.DONE, FinishReason.LENGTH, 5)


def test_duplicate_delivery_of_a_finished_run_changes_nothing(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create()
    generate_run(run_id=run.pk, runtime=sim_runtime)
    events_before = len(stream_of(run))

    assert generate_run(run_id=run.pk, runtime=sim_runtime) is None

    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert len(stream_of(run)) == events_before
    assert Run.objects.get(pk=run.pk).attempts == 1


def test_redelivered_run_continues_from_its_streamed_text_with_no_duplicate_message(sim_runtime: WorkerRuntime) -> None:
    # The first attempt's worker died mid-stream: the run is streaming and its stream holds partial deltas.
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host")
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "half an ans", "tokens": 3, "prompt_tokens": 30})

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run.refresh_from_db()
    assert run.attempts == 2 and run.worker == "sim@test"
    assert (run.recovery, run.resumed_tokens) == (Recovery.CONTINUED, 3)
    entries = stream_of(run)
    assert [e.event for e in entries[:3]] == [StreamEvent.STATUS, StreamEvent.DELTA, StreamEvent.STATUS]
    assert entries[2].data == {"status": "streaming", "attempt": 2, "worker": "sim@test", "continued_from_tokens": 3}
    assert StreamEvent.RESET not in [e.event for e in entries]
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(entries)
    assert run.assistant_message.content.startswith("half an ans")
    assert (run.input_tokens, run.output_tokens) == (30, 3 + 12)


def test_redelivered_run_that_cannot_continue_restarts_with_reset_and_no_duplicate_message(
    sim_runtime: WorkerRuntime,
) -> None:
    # A constrained run cannot go on from text its logits processor never saw: it starts over.
    constraint = {"constraint": {"name": "allowed_tokens", "args": {"token_ids": [1, 2]}}}
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host", sampling=constraint)
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "half an ans", "tokens": 3})

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run.refresh_from_db()
    assert run.attempts == 2 and run.worker == "sim@test"
    assert (run.recovery, run.resumed_tokens) == (Recovery.RESTARTED, 0)
    entries = stream_of(run)
    assert [e.event for e in entries[:4]] == [
        StreamEvent.STATUS,
        StreamEvent.DELTA,
        StreamEvent.RESET,
        StreamEvent.STATUS,
    ]
    assert entries[2].data == {"attempt": 2}
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(entries)
    assert "half an ans" not in run.assistant_message.content


def test_run_held_by_a_live_attempt_is_skipped(sim_runtime: WorkerRuntime, clean_redis: Any) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="other@host")
    clean_redis.set(f"run:{run.pk}:lease", "other@host/1", ex=30)

    assert generate_run(run_id=run.pk, runtime=sim_runtime) is None

    run.refresh_from_db()
    assert (run.status, run.attempts, run.worker) == (RunStatus.STREAMING, 1, "other@host")
    assert stream_of(run) == []


def test_run_fails_after_max_attempts(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=settings.WORKERS.max_attempts)

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.FAILED

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.finish_reason == FinishReason.ERROR
    assert "giving up" in run.error
    assert stream_of(run)[-1].event == StreamEvent.ERROR
    assert not Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).exists()


def test_engine_error_fails_the_run_with_the_error(sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(request: GenerationRequest) -> Any:
        raise RuntimeError("CUDA out of memory (simulated)")
        yield  # pragma: no cover - makes this an async generator

    monkeypatch.setattr(sim_runtime.host.engine, "generate", broken)
    run = RunFactory.create()

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.FAILED

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "CUDA out of memory (simulated)" in run.error
    last = stream_of(run)[-1]
    assert last.event == StreamEvent.ERROR and "CUDA out of memory" in last.data["message"]


def test_cancel_mid_stream_keeps_partial_text_and_frees_the_slot(sim_runtime: WorkerRuntime) -> None:
    engine = cast(SimulatedEngine, sim_runtime.host.engine)
    engine.config = dataclasses.replace(engine.config, sim_output_tokens=400, sim_step_base_s=0.02)
    run = RunFactory.create(max_tokens=400)
    outcome: list[RunStatus | None] = []
    thread = threading.Thread(target=lambda: outcome.append(generate_run(run_id=run.pk, runtime=sim_runtime)))
    thread.start()
    wait_for(lambda: any(e.event == StreamEvent.DELTA for e in stream_of(run)), timeout=10, what="first delta")

    run_cancel(run=Run.objects.get(pk=run.pk))  # streaming -> cancelling, signal on commit
    thread.join(timeout=10)

    assert outcome == [RunStatus.CANCELLED]
    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert run.status == RunStatus.CANCELLED and run.finish_reason == FinishReason.CANCELLED
    assert 0 < run.output_tokens < 400
    assert run.assistant_message is not None
    entries = stream_of(run)
    assert run.assistant_message.content == text_after_last_reset(entries) != ""
    assert entries[-1].event == StreamEvent.DONE and entries[-1].data["status"] == "cancelled"
    assert sim_runtime.host.stats().running == 0 and sim_runtime.active_run_ids() == []


def test_heartbeat_reports_engine_stats(sim_runtime: WorkerRuntime) -> None:
    sim_runtime.beat()
    [beat] = worker_heartbeats()
    assert beat.worker == "sim@test" and beat.model == settings.ENGINE.served_model_name
    assert beat.max_slots == 4 and beat.running == 0 and beat.waiting == 0
    assert beat.age_s() < 5


class _LaggingWriter(ListWriter):
    """Appends that Redis has not answered yet, until the test says when it did."""

    def append_later(self, event: StreamEvent, data: dict[str, Any]) -> Written:
        written = super().append_later(event, data)
        written.done = False  # type: ignore[misc]
        return written


def test_the_flush_interval_counts_from_when_redis_answered_the_last_flush() -> None:
    """A flush is not waited for, but the next one is due an interval after Redis answered it, not after it was sent:
    a writer that lags makes flushes rarer, as when each thread waited for its reply."""
    writer = _LaggingWriter()
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 1.0, max_tokens=100)  # type: ignore[arg-type]
    coalescer.add("A", 1)  # the first text, at once
    sent = coalescer._sent
    assert sent is not None
    coalescer.add("b", 1)
    assert 0.9 < coalescer.wait_s() <= 1.0 and 0.9 < coalescer.hold_s() <= 1.0  # not answered: from the send
    pending = cast(Written, sent.pending)
    pending.done, pending.answered_at = True, coalescer.last_flush + 0.5  # type: ignore[misc]
    assert 1.4 < coalescer.wait_s() <= 1.5 and 1.4 < coalescer.hold_s() <= 1.5
    coalescer.flush_if_due()  # reads the reply; not due
    assert coalescer._sent is None and writer.events == [{"text": "A", "tokens": 1}]
    assert 1.4 < coalescer.hold_s() <= 1.5


def test_coalescer_sends_first_token_at_once_then_batches() -> None:
    writer = ListWriter()
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 60.0, max_tokens=4)  # type: ignore[arg-type]
    coalescer.add("A", 1)
    assert writer.events == [{"text": "A", "tokens": 1}]
    for piece in ("b", "c", "d"):
        coalescer.add(piece, 1)
    assert len(writer.events) == 1  # buffered: neither 4 tokens nor the interval yet
    coalescer.add("e", 1)
    assert writer.events[-1] == {"text": "bcde", "tokens": 4}
    coalescer.add("f", 1)
    coalescer.flush()
    assert writer.events[-1] == {"text": "f", "tokens": 1}
    assert coalescer.text == "Abcdef"


def test_cancel_signalled_before_generation_starts_ends_cancelled_without_text(
    sim_runtime: WorkerRuntime, clean_redis: Any
) -> None:
    run = RunFactory.create()
    clean_redis.set(cancel_key(run.pk), "1")  # the signal landed between the worker's claim and its first step

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.CANCELLED

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.output_tokens == 0 and run.assistant_message is None
    assert stream_of(run)[-1].data["status"] == "cancelled"
    assert not clean_redis.exists(cancel_key(run.pk))


def test_the_deltas_a_thread_was_held_for_go_out_in_one_flush(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine host hands a task thread every delta that arrived while it slept to its next flush, at once; the
    coalescer writes them all in that flush (delta by delta, the first one alone went out then and the rest waited
    out another flush interval)."""
    from generation.result import EngineFinishReason
    from inference_workers import services
    from inference_workers.engine.base import GenerationDelta

    def batches(request: GenerationRequest, **kwargs: Any) -> Any:
        yield [GenerationDelta(text="A", new_tokens=1, prompt_tokens=9)]
        yield [GenerationDelta(text=f" {n}", new_tokens=1) for n in range(5)]  # what came during a hold
        yield [GenerationDelta(text=".", new_tokens=1, finish_reason=EngineFinishReason.STOP)]

    monkeypatch.setattr(sim_runtime.host, "stream_batches", batches)
    monkeypatch.setattr(services, "current_flush_interval", lambda: 0.0)  # every flush is due at once
    run = RunFactory.create(max_tokens=16)
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    deltas = [entry.data for entry in stream_of(run) if entry.event == StreamEvent.DELTA]
    assert [d["tokens"] for d in deltas] == [1, 5, 1]
    assert "".join(d["text"] for d in deltas) == "A 0 1 2 3 4."


def test_an_attempt_reads_its_runs_stream_once_before_the_claim(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch, redis_round_trips: Callable[[], list[str]]
) -> None:
    """The stream's last id (where this attempt numbers from) and what it shows (an answer to continue from, or
    none: a queued run's stream holds only the dispatcher's positions) come from one read, sent with the lease's
    ``SET`` in one round trip."""
    from inference_workers import services

    run = RunFactory.create(max_tokens=4)
    RunStreamWriter(run.pk).append(StreamEvent.STATUS, {"status": RunStatus.QUEUED, "position": 1})
    before_claim: list[str] = []
    claim = services.run_mark_streaming

    def counted_claim(**kwargs: Any) -> Any:
        before_claim.extend(sent)
        return claim(**kwargs)

    monkeypatch.setattr(services, "run_mark_streaming", counted_claim)
    sent = redis_round_trips()
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    assert before_claim == ["SET XRANGE"], before_claim
    events = stream_of(run)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # numbered on from the queued event
    assert events[1].event == StreamEvent.STATUS and events[1].data["status"] == RunStatus.STREAMING
    run.refresh_from_db()
    assert run.recovery == Recovery.NONE  # the positions are no answer


def test_a_generated_run_costs_its_task_thread_three_round_trips_to_redis(
    sim_runtime: WorkerRuntime, redis_round_trips: Callable[[], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Besides its stream's appends (the process's stream writer sends those, the check for a cancel signalled before
    the run was registered with its ``status`` event): the lease with the stream's read, the end's one pipeline (the
    run out of the scheduler, its reservation settled, its counters, its terminal event) and the lease's release with
    a heartbeat. Nine round trips before, then four with the cancel check a round trip of its own."""
    pipelines: list[str] = []  # every thread's, the stream writer's included
    execute = redis.client.Pipeline.execute

    def recorded(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
        pipelines.append(" ".join(str(command[0]) for command, _ in self.command_stack))
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", recorded)
    run = RunFactory.create(max_tokens=4)
    sent = redis_round_trips()
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    load_reads = "ZREMRANGEBYSCORE ZCARD"  # the streams' load, read at most once a second per process: not per run
    sent = [trip for trip in sent if trip != load_reads]
    assert [trip.split()[0] for trip in sent] == ["SET", "EVAL", "EVAL"], sent
    assert sent[0] == "SET XRANGE" and sent[1].endswith("XADD EXPIRE ZREM"), sent
    assert not any(trip.startswith("EXISTS") for trip in sent), sent
    checks = [p for p in pipelines if "EXISTS" in p.split()]
    assert len(checks) == 1 and "XREVRANGE XADD EXPIRE ZADD EXISTS" in checks[0], pipelines  # the status's append
    assert stream_of(run)[-1].event == StreamEvent.DONE


def test_a_cancel_the_listener_sees_while_the_prompt_is_built_ends_the_run_without_asking_the_engine(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the ``status`` event's check, a cancel comes through the runtime's listener (the run is registered):
    one that lands before the engine is asked ends the run ``cancelled`` with no text, and no engine request."""
    from inference_workers import services

    run = RunFactory.create(max_tokens=8)
    build = services.build_run_prompt

    def cancel_lands(**kwargs: Any) -> str:
        assert sim_runtime.request_cancel(run.pk)  # as the listener does on the cancel's message
        return build(**kwargs)

    asked: list[GenerationRequest] = []
    stream_batches = sim_runtime.host.stream_batches

    def spied(request: GenerationRequest, **kwargs: Any) -> Any:
        asked.append(request)
        return stream_batches(request, **kwargs)

    monkeypatch.setattr(services, "build_run_prompt", cancel_lands)
    monkeypatch.setattr(sim_runtime.host, "stream_batches", spied)
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.CANCELLED
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.output_tokens == 0 and run.assistant_message is None
    assert not any(e.event == StreamEvent.DELTA for e in stream_of(run))
    assert asked == []


def test_a_cancel_between_the_first_claims_read_and_its_update_ends_the_run_cancelled(
    sim_runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first attempt's claim reads the run, then updates it only while it is still queued and unstarted: a cancel
    that lands in between makes the update change nothing, and the locking read ends the run ``cancelled`` (as a
    cancel before the claim does), with no attempt counted and nothing generated."""
    from runs import lifecycle

    run = RunFactory.create(max_tokens=4)
    now = lifecycle.timezone.now

    def cancel_lands(*args: Any, **kwargs: Any) -> Any:  # called between the claim's read and its update
        Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(status=RunStatus.CANCELLING)
        return now(*args, **kwargs)

    monkeypatch.setattr(lifecycle.timezone, "now", cancel_lands)
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.CANCELLED
    run.refresh_from_db()
    assert (run.status, run.attempts, run.output_tokens) == (RunStatus.CANCELLED, 0, 0)
    assert not any(e.event == StreamEvent.DELTA for e in stream_of(run))


def test_a_first_attempt_is_claimed_once_and_a_second_claim_takes_the_locking_read(sim_runtime: WorkerRuntime) -> None:
    """The first claim writes what the locking read would (streaming, attempt 1, no recovery); claiming the run
    again (a redelivery whose lease check passed) is no first attempt: it counts attempt 2 as before."""
    from runs.lifecycle import run_mark_streaming

    run = RunFactory.create(max_tokens=4)
    claimed, changed = run_mark_streaming(run_id=run.pk, worker="w1@test")
    stored = Run.objects.get(pk=run.pk)
    assert changed and (claimed.status, claimed.attempts, claimed.worker) == (RunStatus.STREAMING, 1, "w1@test")
    assert (stored.status, stored.attempts, stored.worker, stored.recovery) == (
        RunStatus.STREAMING,
        1,
        "w1@test",
        Recovery.NONE,
    )
    assert stored.started_at == claimed.started_at and claimed.tier.name and claimed.user_message.content
    again, changed = run_mark_streaming(run_id=run.pk, worker="w2@test")
    assert changed and (again.attempts, again.worker, again.recovery) == (2, "w2@test", Recovery.RESTARTED)
