"""What a GPU worker does with a run: claim, generate, stream, finish.

Stream events written here (see ``runs.streaming.contract``): ``status`` {status, attempt, worker} when
generation starts, plus ``continued_from_tokens`` when the attempt continues an earlier one's answer; ``reset``
{attempt} first when a previous attempt had written events it cannot continue from (clients drop its text);
``delta`` {text, tokens}, plus ``logprobs`` (one entry per token) when the run asked for them, and
``prompt_tokens`` on the first one of an answer (not on a continuation's: the answer's first delta carries it),
batched by :class:`inference_workers.coalescer.DeltaCoalescer`.
The terminal ``done`` or ``error`` event is written by the run lifecycle when the run ends (``runs.services``),
whoever ends it.

Continuation: a run whose worker died or drained past its deadline (``ActiveRun.handoff_requested``: the attempt
hands the run back, ``runs.lifecycle.run_handoff``) goes on, on another worker, from the answer its stream shows:
the prompt followed by that text, asked for the tokens left of ``max_tokens``, the new text appended to the
stream after the old, with no ``reset`` and nothing sent twice. ``runs.lifecycle.run_mark_streaming`` decides it
(``Run.recovery``): a constrained, structured-output or tool-calling run, or one with no text to go on from,
starts over after a ``reset`` instead.

One delivery of the generate task is :func:`generate_run`: it takes the run's lease, and a
:class:`GenerationAttempt` does the rest in three steps (open: claim the run and say so in its stream; pump: the
engine's deltas into the stream; result: store the answer, or hand the run on), each saying what it leaves behind
when it stops early.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.db_executor import CONNECTION_ERRORS
from generation.result import EngineFinishReason, GenerationResult
from generation.sampling import SamplingSpec
from inference_workers.coalescer import DeltaCoalescer, StreamLost
from inference_workers.engine.base import EngineDead, EngineError, GenerationDelta, GenerationRequest
from inference_workers.output_moderation import OutputFlagged, output_guard
from inference_workers.prompting import build_run_prompt
from inference_workers.runtime import ActiveRun, WorkerRuntime
from moderation.selectors import moderation_policy
from moderation.services import violation_record
from runs.lifecycle import run_fail, run_finish, run_handoff, run_mark_first_token, run_mark_streaming
from runs.lifecycle_log import RunStep, log_run_step, seconds_between
from runs.models import Recovery, Run, RunStatus
from runs.streaming.batch import stream_batcher
from runs.streaming.contract import (
    RunStreamWriter,
    StreamedAnswer,
    StreamEntry,
    StreamEvent,
    answer_in,
    entries_in,
    read_after_in,
)
from runs.streaming.load import current_flush_interval

logger = logging.getLogger(__name__)

T = TypeVar("T")

DB_RETRY_S = 30.0
"""How long a run's writes to Postgres are retried while it is unreachable (a restart takes seconds)."""


def _with_db_retry(write: Callable[[], T], *, run_id: int, what: str) -> T:
    """``write`` again, on a new connection, while Postgres is unreachable or has dropped this thread's
    connection (a restart), for up to ``DB_RETRY_S``: a run that was generated is not lost to a restart.

    Each of the run writes used here is one transaction that re-reads the run under its row lock: one that
    failed did not commit, and one whose commit went through (its reply lost) left the run in a state the
    retry sees, so a retry never writes twice.
    """
    deadline = time.monotonic() + DB_RETRY_S
    while True:
        try:
            return write()
        except CONNECTION_ERRORS as exc:
            connection.close()
            if time.monotonic() >= deadline:
                raise
            logger.warning("run %s: %s failed (%s); retrying on a new connection", run_id, what, exc)
            time.sleep(0.5)


def release_connection() -> None:
    """Gives this thread's database connection back (to the pool, ``DB_POOL_MAX_SIZE``; closed without one) while
    a run generates: a worker runs a task thread per engine slot (256 on a GPU), more than the pool holds, and a
    thread that kept its connection through the seconds of generation would leave the next runs' claims waiting
    ``DB_POOL_TIMEOUT_S`` for one. Each write of a run is a transaction of its own, so none spans the release (nor
    does a caller's: inside one, as in a test's, the connection stays)."""
    if not connection.in_atomic_block:
        connection.close()


def generate_run(*, run_id: int, runtime: WorkerRuntime, engine_priority: int | None = None) -> RunStatus | None:
    """Generates one run on this worker's engine; returns its final status (None: not ours to generate).
    ``engine_priority``: vLLM's priority the dispatcher chose for it (None: ``Run.priority``, its tier's).

    Safe to call again for the same run (a redelivered task): a run that another live attempt holds is
    skipped, a run whose previous attempt died or handed it off continues from the text its stream shows (or,
    when it cannot, restarts with a ``reset`` event), and only the attempt that still owns the run may write its
    assistant message.

    Raises :class:`EngineDead` without touching the run when this worker's engine is dead (the task goes back
    to the queue for a live worker); a run whose engine dies while it is generated is left to the reaper.
    """
    if runtime.host.dead is not None:
        raise EngineDead(runtime.host.dead)
    # One round trip: the lease, then where this attempt numbers its events from and what the earlier ones streamed.
    taken, (stream,) = runtime.claim_with(run_id, reads=lambda pipe: read_after_in(pipe, run_id, 0))
    if not taken:
        logger.info("run %s: another attempt holds it; skipping this delivery", run_id)
        return None
    try:
        attempt = GenerationAttempt(
            run_id=run_id, runtime=runtime, engine_priority=engine_priority, entries=entries_in(stream)
        )
        return attempt.generate()
    finally:
        runtime.end_run(run_id)  # the lease back, and a heartbeat: its slot is free now


@dataclass(frozen=True)
class _Ended:
    """A step ended the attempt before :meth:`GenerationAttempt.result`."""

    status: RunStatus | None
    """The run's final status (None: the run is not this attempt's to end, or it is left to the reaper)."""


class GenerationAttempt:
    """One attempt at generating a run whose lease this worker holds (:func:`generate_run` takes the lease and
    releases it whatever happens): :meth:`open`, then :meth:`pump`, then :meth:`result` (:meth:`generate`).

    The lease means no other attempt writes the run's stream now: what the stream shows is what clients have seen.
    Made for one :meth:`generate` call.
    """

    def __init__(
        self, *, run_id: int, runtime: WorkerRuntime, engine_priority: int | None, entries: list[StreamEntry]
    ) -> None:
        """``entries``: the run's whole stream, read once its lease was taken (:func:`generate_run`)."""
        self.run_id = run_id
        self.runtime = runtime
        self.engine_priority = engine_priority
        self.writer = RunStreamWriter(
            run_id,
            seq=entries[-1].seq if entries else 0,
            batcher=stream_batcher() if settings.STREAMS.batched_writes else None,
        )
        self.streamed = answer_in(entries) if entries else None
        """What the run's stream showed before this attempt (None: it held no event); :meth:`open` reads it."""
        self.run: Run
        """The run as :meth:`open` claimed it."""
        self.attempt = 0
        """This attempt's number (``Run.attempts`` once claimed)."""
        self.resumed: StreamedAnswer | None = None
        """The earlier attempts' answer in the stream, when this attempt continues it (``Recovery.CONTINUED``)."""
        self.input_tokens = 0
        """The run's input tokens: its own prompt's, as the attempt that began the answer counted them (a
        continuation's prompt also holds the answer so far, which is output, counted in the output tokens)."""
        self.output_tokens = 0
        """This attempt's output tokens (the answer's: these plus :attr:`resumed_tokens`)."""
        self.finish_reason = EngineFinishReason.ABORT
        """The engine's, once its last delta says; ``abort`` until then (a cancel, a handoff)."""
        self.handed_off = False
        """The worker drained past its deadline, or the dispatcher preempted the run, and :meth:`pump` stopped for
        :meth:`result` to hand the run on."""
        self.handoff_reason = "handoff"
        """``ActiveRun.handoff_reason`` once :attr:`handed_off`."""
        self.coalescer: DeltaCoalescer | None = None
        """What writes this attempt's deltas to the stream, once :meth:`pump` has built the engine request."""
        self._last_abort = 0.0

    @property
    def resumed_tokens(self) -> int:
        """The answer's tokens already streamed by the earlier attempts this one continues (0: it does not)."""
        return self.resumed.tokens if self.resumed is not None else 0

    @property
    def text(self) -> str:
        """The answer so far: the earlier attempts' text this one continues, then this attempt's."""
        if self.coalescer is not None:
            return self.coalescer.text
        return self.resumed.text if self.resumed is not None else ""

    def generate(self) -> RunStatus | None:
        """The attempt, step by step; returns the run's final status (None: not this attempt's to end, or left
        to the reaper). The run is registered with the runtime (its cancels, its handoff, its lease refreshed by
        the heartbeat) once claimed, while it is announced and pumped, and unregistered whatever happens, before
        :meth:`result` ends it. An
        exception no step handles (Postgres out past ``DB_RETRY_S``, say) goes to the caller with the run left as
        it is, for the reaper."""
        ended = self.open()
        if ended is not None:
            return ended.status
        active = self.runtime.register(run_id=self.run_id, attempt=self.attempt)
        try:
            ended = self.announce()
            if ended is None:
                ended = self.pump(active)
        finally:
            if self.coalescer is not None:  # an append still on its way lands before the lease is released
                self.coalescer.abandon()
            self.runtime.unregister(self.run_id)
        if ended is not None:
            return ended.status
        return self.result()

    def open(self) -> _Ended | None:
        """Claims the run for this attempt in Postgres (``run_mark_streaming``, retried while Postgres is out).

        Ends the attempt when the claim changed nothing (not this attempt's run: nothing is written), or when the
        claim ended the run (it was cancelling when its previous worker died, or ran out of attempts: its final
        status, nothing written). Nothing is registered with the runtime yet: only the lease, the caller's, is held.
        """
        streamed = self.streamed
        run, changed = _with_db_retry(
            lambda: run_mark_streaming(run_id=self.run_id, worker=self.runtime.worker_name, streamed=streamed),
            run_id=self.run_id,
            what="claiming it",
        )
        if not changed:
            return _Ended(None)
        if run.is_terminal:  # it was cancelling when its previous worker died, or ran out of attempts
            return _Ended(RunStatus(run.status))
        self.run, self.attempt = run, run.attempts
        self.resumed = resumed = streamed if run.recovery == Recovery.CONTINUED else None
        if resumed is not None:
            self.input_tokens = resumed.prompt_tokens or 0
            logger.info(
                "run %s: attempt %s continues from %s streamed tokens", self.run_id, self.attempt, resumed.tokens
            )
        return None

    def announce(self) -> _Ended | None:
        """Says in the run's stream that this attempt has it: a ``reset`` first when the attempt starts the answer
        over, then ``status`` (with ``continued_from_tokens`` when it goes on from the streamed text). Called once
        the run is registered with the runtime: the ``status`` append carries the check for a cancel signalled
        before the registration (after it, the runtime's cancel listener sees one), in the same round trip.

        Ends the attempt when the earlier attempts' answer used up ``max_tokens`` (the run is finished ``length``
        with it), or when a cancel came before the registration (finished ``abort``, no new text)."""
        run, resumed = self.run, self.resumed
        status: dict[str, object] = {"status": run.status, "attempt": self.attempt, "worker": self.runtime.worker_name}
        if resumed is not None:
            status["continued_from_tokens"] = resumed.tokens
        elif run.recovery == Recovery.RESTARTED:  # an earlier attempt's text, if any, is dropped by clients
            self.writer.append(StreamEvent.RESET, {"attempt": self.attempt})
        (cancelled,) = self.writer.append_with(
            StreamEvent.STATUS, status, reads=lambda pipe: self.runtime.cancel_pending_in(pipe, self.run_id)
        )
        if resumed is not None and resumed.tokens >= run.max_tokens:  # the earlier attempts used up max_tokens
            return _Ended(self._finish(EngineFinishReason.LENGTH))
        if cancelled:  # signalled between the claim and the registration: nothing to generate
            return _Ended(self._finish(EngineFinishReason.ABORT))
        return None

    def pump(self, active: ActiveRun) -> _Ended | None:
        """Asks the engine for the answer and writes its deltas to the stream; returns None with everything
        buffered in the stream (generated to the end, cancelled, or stopped for a handoff): :meth:`result` ends
        the run. Called while ``active`` is registered (the caller unregisters it whatever happens); an engine
        request it stops reading is aborted (the host's stream aborts one that is abandoned).

        Ends the attempt, having ended the run, when the prompt (or the stored sampling) cannot be built (failed:
        the engine was not asked), when the runtime's listener saw a cancel while the prompt was built (finished
        ``abort``, no new text), or when the engine fails the request (failed, once the text so far is in the
        stream). Ends it with the run left ``streaming`` for the reaper to requeue on a live worker when the engine
        dies, or when the stream cannot be written (:class:`StreamLost`: the engine request is aborted, the
        unwritten text dropped).
        """
        try:
            request = self._engine_request(active)
        except Exception as exc:  # a prompt (or stored sampling) we cannot use fails this run, not the worker
            logger.exception("run %s: building the prompt failed", self.run_id)
            return _Ended(self._fail(f"Could not build the prompt: {exc}"))
        coalescer = self.coalescer = self._new_coalescer(request)
        release_connection()  # generating takes seconds: the next write takes a connection again
        if active.cancel_requested.is_set():  # the listener saw a cancel while the prompt was built
            return _Ended(self._finish(EngineFinishReason.ABORT))
        try:
            return self._generate_into(coalescer, request=request, active=active)
        except StreamLost as exc:
            self.runtime.host.abort(request.request_id)
            logger.warning(
                "run %s: %s; attempt %s stops and the reaper requeues the run", self.run_id, exc, self.attempt
            )
            return _Ended(None)

    def result(self) -> RunStatus | None:
        """Ends the run with what the attempt generated, once the run is unregistered: after a handoff, the run
        goes back to the queue for another worker (None), unless it is no longer this attempt's to hand on
        (cancelled meanwhile, superseded); otherwise, and then, the answer is stored (None: superseded, dropped)."""
        if self.handed_off and self._hand_off():
            return None
        return self._finish(self.finish_reason)

    # pump's parts

    def _engine_request(self, active: ActiveRun) -> GenerationRequest:
        prompt = build_run_prompt(run=self.run, answer_prefix=self.resumed.text if self.resumed is not None else "")
        return run_generation_request(
            run=self.run,
            request_id=active.request_id,
            prompt=prompt,
            engine_priority=self.engine_priority,
            resumed_tokens=self.resumed_tokens,
        )

    def _new_coalescer(self, request: GenerationRequest) -> DeltaCoalescer:
        coalescer = DeltaCoalescer(
            self.writer,
            interval_s=current_flush_interval,
            max_tokens=settings.STREAMS.flush_max_tokens,
            owns=lambda: self.runtime.holds(self.run_id),
            # Past the lease's TTL without Redis the lease is gone: the run is the reaper's to requeue.
            outage_limit_s=float(settings.WORKERS.heartbeat_ttl_s),
            logprobs=request.sampling.logprobs is not None,
            guard=output_guard(moderation_policy(tier=self.run.tier)),
        )
        if self.resumed is not None:
            coalescer.seed(self.resumed)
            if coalescer.guard is not None:  # read by the attempt that streamed it
                coalescer.guard.checked_chars = len(self.resumed.text)
        return coalescer

    def _generate_into(
        self, coalescer: DeltaCoalescer, *, request: GenerationRequest, active: ActiveRun
    ) -> _Ended | None:
        """The engine's deltas into ``coalescer``, then drained to the stream; raises :class:`StreamLost`."""
        host = self.runtime.host
        try:
            for batch in host.stream_batches(request, poll_s=coalescer.wait_s, hold_s=coalescer.hold_s):
                if active.handoff_requested.is_set() and (batch is None or batch[-1].finish_reason is None):
                    # The worker drains past its deadline: what is in the coalescer goes to the stream (below) and
                    # another worker goes on from there; these deltas and what the engine still had are dropped (the
                    # stream is the answer so far, and no client saw them).
                    host.abort(request.request_id)
                    self.handed_off = True
                    self.handoff_reason = active.handoff_reason
                    break
                if active.cancel_requested.is_set() and time.monotonic() - self._last_abort > 0.5:
                    # An abort that reached the engine before the request did is a no-op: repeat it.
                    host.abort(request.request_id)
                    self._last_abort = time.monotonic()
                if batch is None:
                    coalescer.flush_if_due()
                    continue
                self._take(batch, coalescer, request=request)
        except EngineDead as exc:  # caught before EngineError, which it is
            # Not this run's fault: its lease is released (by generate_run) and the reaper requeues it on a live worker.
            logger.error(
                "run %s: the engine died (%s); attempt %s stops for the reaper", self.run_id, exc, self.attempt
            )
            return _Ended(None)
        except EngineError as exc:
            coalescer.drain()
            return _Ended(self._fail(f"The engine failed: {exc}"))
        except OutputFlagged as flagged:
            self._retract(request, flagged)
            return None
        try:
            coalescer.drain()
        except OutputFlagged as flagged:  # the last window
            self._retract(request, flagged)
        return None

    def _retract(self, request: GenerationRequest, flagged: OutputFlagged) -> None:
        """The output moderation pass flagged the answer: the engine stops, the stream says ``retract`` (clients
        drop the text they show), and :meth:`result` ends the run ``content_filter`` with its message withdrawn."""
        self.runtime.host.abort(request.request_id)
        categories = sorted(name for name, hit in flagged.verdict.categories.items() if hit)
        self.writer.append(StreamEvent.RETRACT, {"categories": categories})
        self.finish_reason = EngineFinishReason.CONTENT_FILTER
        self.handed_off = False
        logger.info("run %s: output flagged (%s); the answer is retracted", self.run_id, ", ".join(categories))

    def _take(self, batch: list[GenerationDelta], coalescer: DeltaCoalescer, *, request: GenerationRequest) -> None:
        """The engine deltas that arrived together: counted, handed to the coalescer, which flushes once after the
        last of them (one flush carries them all), and the first token recorded."""
        first: GenerationDelta | None = None
        for delta in batch:
            if delta.prompt_tokens is not None:
                if self.resumed is None:
                    self.input_tokens = coalescer.prompt_tokens = delta.prompt_tokens
                elif self.resumed.prompt_tokens is None:  # not in the stream: this prompt less the answer so far
                    self.input_tokens = max(0, delta.prompt_tokens - self.resumed.tokens)
            if self.output_tokens == 0 and delta.new_tokens > 0:
                first = delta
            self.output_tokens += delta.new_tokens
            coalescer.add(delta.text, delta.new_tokens, delta.logprobs, flush=False)
            if delta.finish_reason is not None:
                self.finish_reason = EngineFinishReason(delta.finish_reason)
        coalescer.flush_when_due()
        if first is not None:  # the first text goes out before any bookkeeping
            self._first_token(first, request=request)

    def _first_token(self, delta: GenerationDelta, *, request: GenerationRequest) -> None:
        try:
            run_mark_first_token(run_id=self.run_id, attempt=self.attempt)
        except CONNECTION_ERRORS as exc:  # a statistic: not worth holding the stream up while Postgres restarts
            logger.warning("run %s: could not record its first token (%s)", self.run_id, exc)
        release_connection()
        timing: dict[str, object] = {} if delta.timing is None else dict(delta.timing.as_fields())
        log_run_step(
            RunStep.FIRST_TOKEN,
            self.run,
            f"run {self.run_id}: first token (attempt {self.attempt})",
            attempt=self.attempt,
            ttft_s=seconds_between(self.run.created_at, timezone.now()),
            engine_priority=request.priority,
            worker=None,
            level=logging.INFO,
            **timing,  # worker and level given: these can only be record fields
        )

    # how the run ends

    def _answer(self, finish_reason: EngineFinishReason) -> GenerationResult:
        """The run's result, whichever way the attempt ends it (the one place one is built): the whole answer
        (the earlier attempts' text this one continues, then its own) and its tokens, the run's input tokens."""
        guard = self.coalescer.guard if self.coalescer is not None else None
        return GenerationResult(
            text=self.text,
            input_tokens=self.input_tokens,
            output_tokens=self.resumed_tokens + self.output_tokens,
            finish_reason=finish_reason,
            passes=(guard.record(),) if guard is not None else (),
        )

    def _finish(self, finish_reason: EngineFinishReason) -> RunStatus | None:
        result = self._answer(finish_reason)
        finished = _with_db_retry(
            lambda: run_finish(run_id=self.run_id, attempt=self.attempt, result=result, claimed=self.run),
            run_id=self.run_id,
            what="storing its answer",
        )
        if finished is None:
            logger.warning("run %s: attempt %s was superseded; its result is dropped", self.run_id, self.attempt)
            return None
        guard = self.coalescer.guard if self.coalescer is not None else None
        if guard is not None and guard.flagged is not None:
            flagged = guard.flagged
            _with_db_retry(
                lambda: violation_record(
                    user=finished.user,
                    tier=finished.tier,
                    direction="output",
                    verdict=flagged,
                    message_id=finished.assistant_message_id,
                ),
                run_id=self.run_id,
                what="recording its violation",
            )
        return RunStatus(finished.status)

    def _fail(self, error: str) -> RunStatus | None:
        failed = _with_db_retry(
            lambda: run_fail(run_id=self.run_id, error=error, attempt=self.attempt),
            run_id=self.run_id,
            what="failing it",
        )
        return RunStatus.FAILED if failed is not None else None

    def _hand_off(self) -> bool:
        """Gives the run back to the queue for another worker (its text so far is in the stream); False when it is
        no longer this attempt's to hand on (cancelled meanwhile, or superseded): the attempt then ends it as usual.

        The lease goes first, so the next worker's claim finds it free; should the reaper see the run without it
        before the requeue commits, it requeues the run itself and the handoff finds nothing to do."""
        self.runtime.release(self.run_id)
        handed = _with_db_retry(
            lambda: run_handoff(
                run_id=self.run_id, attempt=self.attempt, worker=self.runtime.worker_name, reason=self.handoff_reason
            ),
            run_id=self.run_id,
            what="handing it off",
        )
        if handed is None:
            return False
        why = "preempted" if self.handoff_reason == "preempted" else "the worker drains"
        logger.info("run %s: attempt %s handed it off (%s)", self.run_id, self.attempt, why)
        return True


def run_generation_request(
    *, run: Run, request_id: str, prompt: str, engine_priority: int | None = None, resumed_tokens: int = 0
) -> GenerationRequest:
    """What the engine is asked for this run: its prompt, ``max_tokens``, priority (``engine_priority``, else the
    run's tier priority) and every sampling parameter it stored (``Run.temperature``/``Run.top_p`` plus
    ``Run.sampling``). ``resumed_tokens``: the answer's tokens already streamed, which ``prompt`` ends with; they
    count against ``max_tokens`` and ``min_tokens``."""
    spec = SamplingSpec.from_json(run.sampling or {}, temperature=run.temperature, top_p=run.top_p)
    if resumed_tokens and spec.min_tokens:
        spec = dataclasses.replace(spec, min_tokens=max(0, spec.min_tokens - resumed_tokens))
    priority = run.priority if engine_priority is None else engine_priority
    return GenerationRequest(
        request_id=request_id,
        prompt=prompt,
        max_tokens=run.max_tokens - resumed_tokens,
        sampling=spec,
        priority=priority,
    )
