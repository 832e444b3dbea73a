"""A run whose worker dies or drains mid-answer continues on another worker from the tokens already streamed.

In process, on the simulated engine: an attempt streams part of an answer and stops (its engine "dies", or its
worker drains past the deadline and hands the run off); the run is requeued (``run_requeue_orphan``, what the
reaper calls, or ``run_handoff``) and a second worker's attempt goes on from the stream: no ``reset``, nothing
sent twice, the stored message is what a client reassembled. At temperature 0 the simulated engine's text
depends on the prompt alone (``simulated_token``), so the continuation's text shows the prompt it was given: the
run's prompt followed by the text already streamed. Runs that cannot continue (constrained, structured output,
tools, nothing streamed, a trimmed stream) restart after a ``reset``, as before.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import replace as replace_run
from typing import Any, cast

import pytest
import redis
from pytest_django.fixtures import Settings

from chats.models import Message, MessageRole
from core.redis_client import get_redis
from deployments.models import DeploymentStatus, ModelDeployment
from deployments.selection import forget_cached
from generation.worker_contract import request_yields, run_lease_holder
from inference_workers.coalescer import DeltaCoalescer
from inference_workers.engine.base import EngineDead, GenerationDelta, GenerationRequest
from inference_workers.engine.simulated import SimulatedEngine, simulated_token
from inference_workers.prompting import build_run_prompt
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.lifecycle import run_requeue_orphan
from runs.models import FinishReason, Recovery, Run, RunStatus
from runs.queueing import get_scheduler_store
from runs.streaming.contract import (
    RunStreamWriter,
    StreamedAnswer,
    StreamEntry,
    StreamEvent,
    read_after,
    stream_key,
    streamed_answer,
)
from scheduling.policy import QueuedRun
from tests.deployment_helpers import add_version, no_ready_worker
from tests.factories import RunFactory
from tests.inference_workers.conftest import running_sim_runtime, stream_of, text_after_last_reset, wait_for
from tests.inference_workers.test_stream_outage import FlakyRedis

pytestmark = pytest.mark.django_db(transaction=True)

DIES_AFTER = 4
"""Deltas the first attempt streams before its engine "dies"."""


@pytest.fixture
def every_token_flushed(settings: Settings) -> None:
    """Each delta goes to the stream as it comes: what a dying attempt leaves there is exactly what it generated."""
    settings.STREAMS = dataclasses.replace(settings.STREAMS, flush_max_tokens=1)


@pytest.fixture
def second_runtime() -> Iterator[WorkerRuntime]:
    """The live worker that takes the run over."""
    with running_sim_runtime(worker_name="second@test") as runtime:
        yield runtime


def _die_after(runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch, deltas: int) -> None:
    """The runtime's engine dies after ``deltas`` deltas of the next request (a crash mid-answer)."""
    real_batches = runtime.host.stream_batches

    def dying_batches(request: GenerationRequest, **kwargs: Any) -> Iterator[list[GenerationDelta] | None]:
        seen = 0
        for batch in real_batches(request, **kwargs):
            if batch is None:
                yield None
                continue
            yield batch[: deltas - seen]
            seen += min(len(batch), deltas - seen)
            if seen == deltas:  # asked for more: it dies, whatever the engine had made meanwhile
                raise EngineDead("the engine process was killed (simulated)")

    monkeypatch.setattr(runtime.host, "stream_batches", dying_batches)


def _deltas(entries: list[StreamEntry]) -> list[StreamEntry]:
    return [e for e in entries if e.event == StreamEvent.DELTA]


def _attempt_dies_mid_answer(run: Run, runtime: WorkerRuntime, monkeypatch: pytest.MonkeyPatch) -> StreamedAnswer:
    """Attempt 1 streams ``DIES_AFTER`` tokens and dies; the reaper's requeue puts the run back in the queue."""
    _die_after(runtime, monkeypatch, DIES_AFTER)
    assert generate_run(run_id=run.pk, runtime=runtime) is None  # left for the reaper
    assert Run.objects.get(pk=run.pk).status == RunStatus.STREAMING
    assert run_lease_holder(run_id=run.pk) is None  # released when the attempt stopped
    before = streamed_answer(run.pk)
    assert before.tokens == DIES_AFTER and before.text and before.intact
    requeued = run_requeue_orphan(run_id=run.pk, worker=runtime.worker_name, attempt=1)
    assert requeued is not None and requeued.status == RunStatus.QUEUED
    return before


def _expected_continuation(run: Run, streamed_text: str, tokens: int) -> str:
    """The simulated engine's answer (temperature 0) to the run's prompt followed by the streamed text."""
    prompt = build_run_prompt(run=run) + streamed_text
    return "".join(simulated_token(prompt, i) for i in range(tokens))


def _assert_continued(run: Run, before: StreamedAnswer, *, attempt: int = 2) -> Run:
    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    entries = stream_of(run)
    assert StreamEvent.RESET not in [e.event for e in entries]
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    statuses = [e for e in entries if e.event == StreamEvent.STATUS]
    assert [s.data["attempt"] for s in statuses] == list(range(1, attempt + 1))
    assert statuses[-1].data["continued_from_tokens"] == before.tokens
    assert "continued_from_tokens" not in statuses[0].data
    # What a client reassembled is the stored answer: the old text once, then the new text.
    assert run.assistant_message is not None
    content = run.assistant_message.content
    assert content == text_after_last_reset(entries)
    assert content.startswith(before.text)
    new = _deltas([e for e in entries if e.seq > statuses[-1].seq])
    assert "".join(e.data["text"] for e in new) == content[len(before.text) :] != ""
    assert all("prompt_tokens" not in e.data for e in new)  # the answer's first delta carries it
    new_tokens = sum(e.data["tokens"] for e in new)
    assert run.recovery == Recovery.CONTINUED and run.resumed_tokens == before.tokens
    assert run.output_tokens == before.tokens + new_tokens == sum(e.data["tokens"] for e in _deltas(entries))
    assert run.input_tokens == _deltas(entries)[0].data["prompt_tokens"]  # the run's prompt, as first counted
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert entries[-1].event == StreamEvent.DONE
    assert entries[-1].data["usage"]["output_tokens"] == run.output_tokens
    return run


def test_a_run_whose_worker_died_continues_from_the_streamed_tokens(
    sim_runtime: WorkerRuntime,
    second_runtime: WorkerRuntime,
    monkeypatch: pytest.MonkeyPatch,
    every_token_flushed: None,
) -> None:
    run = RunFactory.create(max_tokens=64, temperature=0.0)
    before = _attempt_dies_mid_answer(run, sim_runtime, monkeypatch)

    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE

    run = _assert_continued(run, before)
    assert run.attempts == 2 and run.worker == "second@test" and run.finish_reason == FinishReason.STOP
    # The engine was asked to go on from the run's prompt plus the streamed text (its answer is the prompt's).
    new_text = run.assistant_message.content[len(before.text) :]  # type: ignore[union-attr]
    assert new_text == _expected_continuation(run, before.text, run.output_tokens - before.tokens)


def test_a_continuation_asks_only_for_the_tokens_left_of_max_tokens(
    sim_runtime: WorkerRuntime,
    second_runtime: WorkerRuntime,
    monkeypatch: pytest.MonkeyPatch,
    every_token_flushed: None,
) -> None:
    run = RunFactory.create(max_tokens=DIES_AFTER + 3, temperature=0.0)  # the engine would write 12 more
    before = _attempt_dies_mid_answer(run, sim_runtime, monkeypatch)

    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE

    run = _assert_continued(run, before)
    assert run.finish_reason == FinishReason.LENGTH and run.output_tokens == DIES_AFTER + 3


def test_a_run_whose_streamed_tokens_reached_max_tokens_ends_at_once(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host", max_tokens=3)
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "a whole ans", "tokens": 2, "prompt_tokens": 21})
    writer.append(StreamEvent.DELTA, {"text": "wer", "tokens": 1})  # the worker died before its finish

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert (run.finish_reason, run.output_tokens, run.input_tokens) == (FinishReason.LENGTH, 3, 21)
    assert run.assistant_message is not None and run.assistant_message.content == "a whole answer"
    assert (run.recovery, run.resumed_tokens) == (Recovery.CONTINUED, 3)
    assert [e.event for e in stream_of(run)] == [
        StreamEvent.STATUS,
        StreamEvent.DELTA,
        StreamEvent.DELTA,
        StreamEvent.STATUS,
        StreamEvent.DONE,
    ]


@pytest.mark.parametrize(
    "blocker",
    [
        {"sampling": {"constraint": {"name": "allowed_tokens", "args": {"token_ids": [1, 2]}}}},
        {"sampling": {"structured_outputs": {"choice": ["yes", "no"]}}},
        {"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]},
    ],
    ids=["constraint", "structured_outputs", "tools"],
)
def test_a_run_that_cannot_continue_restarts_after_a_reset(
    sim_runtime: WorkerRuntime,
    second_runtime: WorkerRuntime,
    monkeypatch: pytest.MonkeyPatch,
    every_token_flushed: None,
    blocker: dict[str, Any],
) -> None:
    run = RunFactory.create(max_tokens=64, temperature=0.0, **blocker)
    before = _attempt_dies_mid_answer(run, sim_runtime, monkeypatch)

    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE

    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert (run.recovery, run.resumed_tokens) == (Recovery.RESTARTED, 0)
    entries = stream_of(run)
    [reset] = [e for e in entries if e.event == StreamEvent.RESET]
    assert reset.data == {"attempt": 2}
    assert entries[entries.index(reset) + 1].event == StreamEvent.STATUS
    assert "continued_from_tokens" not in entries[entries.index(reset) + 1].data
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(entries)
    after_reset = _deltas(entries[entries.index(reset) :])
    assert run.output_tokens == sum(e.data["tokens"] for e in after_reset) == 12  # all of it again
    assert run.input_tokens == after_reset[0].data["prompt_tokens"]
    # Started over from the prompt alone: the same first tokens as the first attempt (temperature 0).
    assert run.assistant_message.content.startswith(before.text)


@pytest.mark.parametrize("stream", ["status_only", "trimmed"])
def test_a_stream_without_text_to_go_on_from_restarts_after_a_reset(sim_runtime: WorkerRuntime, stream: str) -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host")
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    if stream == "trimmed":  # its start is gone (maxlen): the text a client shows is unknown
        writer.append(StreamEvent.DELTA, {"text": "the start", "tokens": 2, "prompt_tokens": 20})
        writer.append(StreamEvent.DELTA, {"text": " and the rest", "tokens": 3})
        writer.client.xtrim(stream_key(run.pk), minid="0-3", approximate=False)
        assert not streamed_answer(run.pk).intact

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert (run.recovery, run.resumed_tokens) == (Recovery.RESTARTED, 0)
    entries = stream_of(run)
    assert StreamEvent.RESET in [e.event for e in entries]
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(entries) != ""
    assert "the rest" not in run.assistant_message.content and run.output_tokens == 12


def test_a_draining_worker_hands_its_run_off_and_the_next_worker_continues_it(
    sim_runtime: WorkerRuntime, second_runtime: WorkerRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    # Long answers on the draining worker, and the default flush (the coalescer buffers: the handoff drains it).
    engine = cast(SimulatedEngine, sim_runtime.host.engine)
    engine.config = dataclasses.replace(engine.config, sim_output_tokens=400, sim_step_base_s=0.01)
    default = ModelDeployment.objects.get(is_default=True)
    run = RunFactory.create(max_tokens=400, temperature=0.0, deployment=default)
    outcome: list[RunStatus | None] = []
    thread = threading.Thread(target=lambda: outcome.append(generate_run(run_id=run.pk, runtime=sim_runtime)))
    thread.start()
    wait_for(lambda: len(_deltas(stream_of(run))) >= 3, timeout=10, what="three deltas")
    # The worker's deployment drains (a newer version takes the traffic) and the worker's deadline passes.
    ModelDeployment.objects.filter(pk=default.pk).update(status=DeploymentStatus.DRAINING)
    v2 = add_version("v2", weight=100)
    forget_cached()
    assert sim_runtime.request_handoff(run.pk)
    thread.join(timeout=10)

    assert outcome == [None]  # handed off, not finished
    requeued = Run.objects.get(pk=run.pk)
    assert (requeued.status, requeued.worker, requeued.attempts) == (RunStatus.QUEUED, "", 1)
    assert requeued.deployment_id == v2.pk  # re-targeted: its own version drains
    assert run_lease_holder(run_id=run.pk) is None and sim_runtime.active_run_ids() == []
    assert get_scheduler_store().is_queued_or_in_flight(run.pk, run.tier.name)
    handoffs = [r for r in caplog.records if getattr(r, "event", "") == "requeued"]
    assert [getattr(r, "reason", "") for r in handoffs] == ["handoff"]
    assert getattr(handoffs[0], "moved_to", "") == v2.key
    before = streamed_answer(run.pk)
    assert 3 <= before.tokens < 400 and StreamEvent.DONE not in [e.event for e in stream_of(run)]

    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE

    run = _assert_continued(run, before)
    new_text = run.assistant_message.content[len(before.text) :]  # type: ignore[union-attr]
    assert new_text == _expected_continuation(run, before.text, run.output_tokens - before.tokens)


def test_a_handoff_of_a_run_being_cancelled_ends_it_cancelled(sim_runtime: WorkerRuntime) -> None:
    engine = cast(SimulatedEngine, sim_runtime.host.engine)
    engine.config = dataclasses.replace(engine.config, sim_output_tokens=400, sim_step_base_s=0.01)
    run = RunFactory.create(max_tokens=400)
    outcome: list[RunStatus | None] = []
    thread = threading.Thread(target=lambda: outcome.append(generate_run(run_id=run.pk, runtime=sim_runtime)))
    thread.start()
    wait_for(lambda: bool(_deltas(stream_of(run))), timeout=10, what="the first delta")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLING)  # the cancel's signal not seen yet
    assert sim_runtime.request_handoff(run.pk)
    thread.join(timeout=10)

    assert outcome == [RunStatus.CANCELLED]
    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(stream_of(run)) != ""


def _dead_streaming_run(**fields: Any) -> Run:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1, worker="dead@host", **fields)
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "half an ans", "tokens": 3, "prompt_tokens": 20})
    return run


def test_a_requeued_run_moves_to_a_ready_version_when_its_own_drains(
    second_runtime: WorkerRuntime, every_token_flushed: None
) -> None:
    default = ModelDeployment.objects.get(is_default=True)
    run = _dead_streaming_run(deployment=default, temperature=0.0)
    ModelDeployment.objects.filter(pk=default.pk).update(status=DeploymentStatus.DRAINING)
    v2 = add_version("v2", weight=100)

    requeued = run_requeue_orphan(run_id=run.pk, worker="dead@host", attempt=1)

    assert requeued is not None and requeued.status == RunStatus.QUEUED
    assert Run.objects.get(pk=run.pk).deployment_id == v2.pk
    before = streamed_answer(run.pk)
    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE
    run = _assert_continued(run, before)
    assert run.deployment_id == v2.pk and before.text == "half an ans"


def test_a_requeued_run_moves_when_its_version_has_no_ready_worker() -> None:
    default = ModelDeployment.objects.get(is_default=True)
    run = _dead_streaming_run(deployment=default)
    no_ready_worker(default.key)
    v2 = add_version("v2", weight=100)

    assert run_requeue_orphan(run_id=run.pk, worker="dead@host", attempt=1) is not None
    assert Run.objects.get(pk=run.pk).deployment_id == v2.pk


@pytest.mark.parametrize("case", ["own_version_serves", "no_other_version", "other_version_has_no_worker"])
def test_a_requeued_run_stays_on_its_version_unless_another_can_take_it(case: str) -> None:
    default = ModelDeployment.objects.get(is_default=True)
    run = _dead_streaming_run(deployment=default)
    if case == "own_version_serves":
        add_version("v2", weight=100)  # the run is not moved to follow the traffic: its own still serves
    elif case == "no_other_version":
        ModelDeployment.objects.filter(pk=default.pk).update(status=DeploymentStatus.DRAINING)
        forget_cached()
    else:
        ModelDeployment.objects.filter(pk=default.pk).update(status=DeploymentStatus.DRAINING)
        add_version("v2", weight=100, worker=False)

    requeued = run_requeue_orphan(run_id=run.pk, worker="dead@host", attempt=1)

    assert requeued is not None and requeued.status == RunStatus.QUEUED
    assert Run.objects.get(pk=run.pk).deployment_id == default.pk  # it waits where it is


def test_a_seeded_coalescer_resends_the_earlier_text_too_after_lost_entries(clean_redis: redis.Redis) -> None:
    earlier = RunStreamWriter(31)
    earlier.append(StreamEvent.DELTA, {"text": "old text", "tokens": 2, "prompt_tokens": 9})
    flaky = FlakyRedis(clean_redis)
    writer = RunStreamWriter(31, client=flaky)  # type: ignore[arg-type]
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 0.0, max_tokens=1, retry_s=0.0)
    coalescer.seed(streamed_answer(31))
    coalescer.add(" a", 1)
    assert [e.data for e in read_after(31, 1)] == [{"text": " a", "tokens": 1}]  # only the new text, at once
    clean_redis.xdel(stream_key(31), "0-1", "0-2")  # Redis came back without them
    flaky.down = 1
    coalescer.add(" b", 1)
    coalescer.add(" c", 1)
    coalescer.drain()

    entries = read_after(31, 0)
    assert [e.event for e in entries] == [StreamEvent.RESET, StreamEvent.DELTA]
    assert entries[-1].data == {"text": "old text a b c", "tokens": 5}
    assert coalescer.text == text_after_last_reset(entries) == "old text a b c"
    assert streamed_answer(31).text == "old text a b c"


def test_streamed_answer_reads_the_text_since_the_last_reset(clean_redis: redis.Redis) -> None:
    writer = RunStreamWriter(32)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "dropped", "tokens": 1, "prompt_tokens": 7})
    writer.append(StreamEvent.RESET, {"attempt": 2})
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 2})
    lp = {"token": "x", "logprob": -0.1, "bytes": [120], "top_logprobs": []}
    writer.append(StreamEvent.DELTA, {"text": "kept", "tokens": 1, "prompt_tokens": 8, "logprobs": [lp]})
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 3, "continued_from_tokens": 1})
    writer.append(StreamEvent.DELTA, {"text": " too", "tokens": 1, "logprobs": [lp]})

    assert streamed_answer(32) == StreamedAnswer(
        text="kept too", tokens=2, logprobs=[lp, lp], prompt_tokens=8, intact=True
    )
    assert streamed_answer(33) == StreamedAnswer(text="", tokens=0, logprobs=[], prompt_tokens=None, intact=True)


def test_a_first_attempt_after_queued_status_events_is_no_recovery(sim_runtime: WorkerRuntime) -> None:
    """The dispatcher writes ``queued`` status events (position, wait) while a run waits: they are no answer, so the
    first attempt neither resets the stream nor records a recovery (the rollout benchmark caught both)."""
    run = RunFactory.create(max_tokens=8, temperature=0.0)
    RunStreamWriter(run.pk).append(StreamEvent.STATUS, {"status": "queued", "queue_position": 1, "estimated_wait_s": 1})
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    run.refresh_from_db()
    entries = stream_of(run)
    assert StreamEvent.RESET not in [e.event for e in entries]
    assert (run.recovery, run.resumed_tokens, run.attempts) == (Recovery.NONE, 0, 1)


def test_with_continuation_off_a_requeued_run_restarts(
    sim_runtime: WorkerRuntime,
    second_runtime: WorkerRuntime,
    monkeypatch: pytest.MonkeyPatch,
    every_token_flushed: None,
    settings: Settings,
) -> None:
    settings.DEPLOYMENTS = dataclasses.replace(settings.DEPLOYMENTS, continue_runs=False)
    run = RunFactory.create(max_tokens=32, temperature=0.0)
    _attempt_dies_mid_answer(run, sim_runtime, monkeypatch)
    assert generate_run(run_id=run.pk, runtime=second_runtime) == RunStatus.DONE
    run = Run.objects.select_related("assistant_message").get(pk=run.pk)
    entries = stream_of(run)
    assert [e.event for e in entries].count(StreamEvent.RESET) == 1
    assert run.recovery == Recovery.RESTARTED and run.resumed_tokens == 0
    assert run.assistant_message is not None and run.assistant_message.content == text_after_last_reset(entries)


def test_a_preempted_run_yields_its_slot_and_goes_on_first_from_its_streamed_text(
    sim_runtime: WorkerRuntime, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The dispatcher's preemption (``request_yields``) reaches the worker through the yield channel: the attempt
    stops within a step, the run goes back ahead of its user's later runs with its dispatch's fair-share charge
    refunded, and the next attempt continues from the streamed text. A hand-off is not a failed attempt: with
    ``WORKER_MAX_ATTEMPTS`` 1 the second attempt still runs."""
    settings.WORKERS = dataclasses.replace(settings.WORKERS, max_attempts=1)
    engine = cast(SimulatedEngine, sim_runtime.host.engine)
    engine.config = dataclasses.replace(engine.config, sim_output_tokens=400, sim_step_base_s=0.01)
    run = RunFactory.create(max_tokens=400, temperature=0.0, reserved_tokens=500)
    store = get_scheduler_store()
    queued = QueuedRun(run_id=run.pk, user_id=run.user_id, tier=run.tier.name, cost=500)
    store.push(queued)
    assert store.claim(queued)  # dispatched
    store.push(replace_run(queued, run_id=run.pk + 1000))  # the user's next prompt, queued after it
    store.take_refunds()
    outcome: list[RunStatus | None] = []
    thread = threading.Thread(target=lambda: outcome.append(generate_run(run_id=run.pk, runtime=sim_runtime)))
    thread.start()
    wait_for(lambda: len(_deltas(stream_of(run))) >= 3, timeout=10, what="three deltas")
    request_yields([run.pk], client=get_redis())
    thread.join(timeout=10)

    assert outcome == [None]
    requeued = Run.objects.get(pk=run.pk)
    assert (requeued.status, requeued.attempts, requeued.handoffs) == (RunStatus.QUEUED, 1, 1)
    assert [r.run_id for r in store.all_queued().runs()] == [run.pk, run.pk + 1000]
    assert store.take_refunds() == [(run.tier.name, run.user_id, 500.0)]
    reasons = [getattr(r, "reason", "") for r in caplog.records if getattr(r, "event", "") == "requeued"]
    assert reasons == ["preempted"]
    before = streamed_answer(run.pk)
    assert 3 <= before.tokens < 400

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    run = _assert_continued(run, before)
    assert run.output_tokens == 400
