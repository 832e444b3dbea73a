"""What a GPU worker does with a run: claim, generate, stream, finish.

Stream events written here (see ``runs.streaming.contract``): ``status`` {status, attempt, worker} when
generation starts, plus ``continued_from_tokens`` when the attempt continues an earlier one's answer; ``reset``
{attempt} first when a previous attempt had written events it cannot continue from (clients drop its text);
``delta`` {text, tokens}, plus ``logprobs`` (one entry per token) when the run asked for them, and
``prompt_tokens`` on the first one of an answer (not on a continuation's: the answer's first delta carries it).
The terminal ``done`` or ``error`` event is written by the run lifecycle when the run ends (``runs.services``),
whoever ends it.

Continuation: a run whose worker died or drained past its deadline (``ActiveRun.handoff_requested``: the attempt
hands the run back, ``runs.services.run_handoff``) goes on, on another worker, from the answer its stream shows:
the prompt followed by that text, asked for the tokens left of ``max_tokens``, the new text appended to the
stream after the old, with no ``reset`` and nothing sent twice. ``runs.services.run_mark_streaming`` decides it
(``Run.recovery``): a constrained, structured-output or tool-calling run, or one with no text to go on from,
starts over after a ``reset`` instead.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.db_executor import CONNECTION_ERRORS
from generation.result import EngineFinishReason, GenerationResult
from generation.sampling import SamplingSpec
from inference_workers.engine.base import GenerationRequest
from inference_workers.engine.host import EngineDied, EngineError
from inference_workers.prompting import build_run_prompt
from inference_workers.runtime import WorkerRuntime
from runs.lifecycle_log import RunStep, log_run_step, seconds_between
from runs.models import Recovery, Run, RunStatus
from runs.services import run_fail, run_finish, run_handoff, run_mark_first_token, run_mark_streaming
from runs.streaming.contract import RunStreamWriter, StreamedAnswer, StreamEvent, streamed_answer
from runs.streaming.load import current_flush_interval

logger = logging.getLogger(__name__)

T = TypeVar("T")

STREAM_ERRORS = (redis.ConnectionError, redis.TimeoutError)
"""Redis not answering (a restart, a network blip): the coalescer keeps its text and tries again."""

DB_RETRY_S = 30.0
"""How long a run's writes to Postgres are retried while it is unreachable (a restart takes seconds)."""

IDLE_WAIT_S = 0.5
"""The generation loop's wait for a delta when nothing is buffered; it also bounds how late a repeated abort
of a cancelled run goes to the engine (the cancel listener's abort normally lands within one step)."""


class StreamLost(RuntimeError):
    """The run's stream cannot be written: Redis stayed unreachable past the coalescer's outage limit, or the
    attempt lost the run's lease meanwhile. The attempt stops; the reaper requeues the run."""


@dataclass
class _Part:
    """One engine delta not yet in the stream."""

    text: str
    tokens: int
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class DeltaCoalescer:
    """Buffers deltas: the first text goes out at once, then every ``interval_s`` or ``max_tokens`` tokens.

    With ``logprobs`` (the run asked for them) each part keeps its tokens' logprob entries and every delta event
    carries those of its tokens, ``"logprobs": [...]``; a flush of tokens without text (the end-of-sequence
    token) is then written too, so every token's entry reaches the stream. Without, such a flush writes nothing.

    It rides out a short Redis outage (a restart): an append that fails keeps its text buffered and the next
    flush, ``retry_s`` later, tries again, so generation goes on and nothing is lost or sent twice. Before the
    first write after an outage it checks that this attempt still holds the run (``owns``: its lease may have
    expired meanwhile and the run been requeued), whether the failed append had reached Redis after all (only
    its reply lost), and whether the stream lost entries (Redis restarted without them): then a ``reset`` and
    the whole text so far go out, so a client's text is exact again. Past ``outage_limit_s`` without Redis,
    or without the lease, it raises :class:`StreamLost`.
    """

    def __init__(
        self,
        writer: RunStreamWriter,
        *,
        interval_s: Callable[[], float],
        max_tokens: int,
        owns: Callable[[], bool] = lambda: True,
        outage_limit_s: float = 10.0,
        retry_s: float = 0.25,
        logprobs: bool = False,
    ) -> None:
        self.writer = writer
        self.interval_s = interval_s
        """Called at each flush decision: the interval grows with the number of live streams."""
        self.max_tokens = max_tokens
        self.owns = owns
        self.outage_limit_s = outage_limit_s
        self.retry_s = retry_s
        self.logprobs = logprobs
        self.parts: list[_Part] = []
        """Deltas not yet in the stream."""
        self.text_parts: list[str] = []
        self.logprob_entries: list[dict[str, Any]] = []
        """Every logprob entry so far (with ``logprobs``): a resend after lost entries sends them all again."""
        self.tokens = 0
        self.prompt_tokens: int | None = None
        """The prompt's length as the engine counted it, once known: the first delta written carries it (an
        OpenAI stream's running usage, ``stream_options.continuous_usage_stats``)."""
        self.last_flush = 0.0
        self.flushes = 0
        self._down_since: float | None = None
        self._next_try = 0.0
        self._unsure: tuple[int, int] | None = None
        """(id, parts) of a failed append that Redis may have applied anyway."""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def seed(self, answer: StreamedAnswer) -> None:
        """Starts from an answer already in the stream (an earlier attempt's, which this one continues): it counts
        in :attr:`text`, :attr:`tokens` and the logprob entries, and a resend after lost entries sends it too,
        but it is not written again. The first new text still goes out at once, without ``prompt_tokens``."""
        self.text_parts = [answer.text]
        self.tokens = answer.tokens
        self.logprob_entries = list(answer.logprobs) if self.logprobs else []

    @property
    def buffered_tokens(self) -> int:
        return sum(part.tokens for part in self.parts)

    def add(self, text: str, tokens: int, logprobs: list[dict[str, Any]] | None = None) -> None:
        if not text and not tokens:
            return
        entries = list(logprobs or []) if self.logprobs else []
        self.parts.append(_Part(text, tokens, entries))
        self.text_parts.append(text)
        self.logprob_entries.extend(entries)
        self.tokens += tokens
        if self.flushes == 0 or self.buffered_tokens >= self.max_tokens:
            self.flush()
        else:
            self.flush_if_due()

    def wait_s(self) -> float:
        """How long the generation loop may wait for the next delta: until a buffered flush is due, else
        ``IDLE_WAIT_S`` (a thread per run waking every flush interval for nothing was most of a worker's CPU
        between tokens)."""
        if not self.parts:
            return IDLE_WAIT_S
        due = self.last_flush + self.interval_s()
        if self._down_since is not None:  # Redis is out: the next try, not a spin until it is back
            due = max(due, self._next_try)
        return max(0.001, due - time.monotonic())

    def flush_if_due(self) -> None:
        if self.parts and time.monotonic() - self.last_flush >= self.interval_s():
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        now = time.monotonic()
        if self._down_since is not None and now < self._next_try:
            return
        try:
            if self._down_since is not None:
                self._resume()
            self._append_buffered()
        except STREAM_ERRORS as exc:
            if self._down_since is None:
                self._down_since = now
                logger.warning("run %s: its stream is unreachable (%s); buffering the text", self.writer.run_id, exc)
            if now - self._down_since > self.outage_limit_s:
                raise StreamLost(f"Redis unreachable for {now - self._down_since:.1f} s") from exc
            self._next_try = now + self.retry_s
            return
        if self._down_since is not None:
            logger.info("run %s: stream reachable again after %.1f s", self.writer.run_id, now - self._down_since)
            self._down_since = None

    def drain(self) -> None:
        """Flushes what is buffered, waiting out a Redis outage (up to the limit, then :class:`StreamLost`)."""
        self.flush()
        while self.parts:
            time.sleep(self.retry_s)
            self.flush()

    def _append_buffered(self) -> None:
        count = len(self.parts)
        text = "".join(part.text for part in self.parts)
        data: dict[str, Any] = {"text": text, "tokens": self.buffered_tokens}
        if self.flushes == 0 and self.prompt_tokens is not None:
            data["prompt_tokens"] = self.prompt_tokens
        if self.logprobs:
            data["logprobs"] = [entry for part in self.parts for entry in part.logprobs]
        if text or data.get("logprobs"):
            try:
                self.writer.append(StreamEvent.DELTA, data)
            except STREAM_ERRORS:
                self._unsure = (self.writer.seq + 1, count)
                raise
            self.flushes += 1
        del self.parts[:count]
        self.last_flush = time.monotonic()

    def _resume(self) -> None:
        """The first write after Redis errors: is the run still ours, and what does its stream hold?"""
        if not self.owns():
            raise StreamLost("the attempt lost the run's lease while Redis was unreachable")
        last = self.writer.last_in_stream()
        if self._unsure is not None:
            seq, count = self._unsure
            self._unsure = None
            if last >= seq:  # it had been written; only its reply was lost
                self.writer.written_up_to(seq)
                self.flushes += 1
                del self.parts[:count]
        if last < self.writer.seq:  # Redis came back without entries it had acknowledged
            logger.warning(
                "run %s: its stream lost entries %s-%s; resending the text",
                self.writer.run_id,
                last + 1,
                self.writer.seq,
            )
            self.writer.append(StreamEvent.RESET, {})
            self.parts = [_Part(self.text, self.tokens, list(self.logprob_entries))]


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


def generate_run(*, run_id: int, runtime: WorkerRuntime, engine_priority: int | None = None) -> RunStatus | None:
    """Generates one run on this worker's engine; returns its final status (None: not ours to generate).
    ``engine_priority``: vLLM's priority the dispatcher chose for it (None: ``Run.priority``, its tier's).

    Safe to call again for the same run (a redelivered task): a run that another live attempt holds is
    skipped, a run whose previous attempt died or handed it off continues from the text its stream shows (or,
    when it cannot, restarts with a ``reset`` event), and only the attempt that still owns the run may write its
    assistant message.

    Raises :class:`EngineDied` without touching the run when this worker's engine is dead (the task goes back
    to the queue for a live worker); a run whose engine dies while it is generated is left to the reaper.
    """
    if runtime.host.dead is not None:
        raise EngineDied(runtime.host.dead)
    if not runtime.claim(run_id):
        logger.info("run %s: another attempt holds it; skipping this delivery", run_id)
        return None
    try:
        return _generate_claimed(run_id=run_id, runtime=runtime, engine_priority=engine_priority)
    finally:
        runtime.release(run_id)
        runtime.beat_after_run()  # its slot is free now: the dispatcher need not wait for the next heartbeat


def _generate_claimed(*, run_id: int, runtime: WorkerRuntime, engine_priority: int | None) -> RunStatus | None:
    # This attempt holds the lease: no other writes the stream now, and what it shows is what clients have seen.
    writer = RunStreamWriter(run_id)
    streamed = streamed_answer(run_id, client=writer.client) if writer.seq > 0 else None
    run, changed = _with_db_retry(
        lambda: run_mark_streaming(run_id=run_id, worker=runtime.worker_name, streamed=streamed),
        run_id=run_id,
        what="claiming it",
    )
    if not changed:
        return None
    if run.is_terminal:  # it was cancelling when its previous worker died, or ran out of attempts
        return RunStatus(run.status)

    attempt = run.attempts
    resumed = streamed if run.recovery == Recovery.CONTINUED else None
    status: dict[str, object] = {"status": run.status, "attempt": attempt, "worker": runtime.worker_name}
    if resumed is not None:
        status["continued_from_tokens"] = resumed.tokens
        logger.info("run %s: attempt %s continues from %s streamed tokens", run_id, attempt, resumed.tokens)
    elif run.recovery == Recovery.RESTARTED:  # an earlier attempt's text, if any, is dropped by clients
        writer.append(StreamEvent.RESET, {"attempt": attempt})
    writer.append(StreamEvent.STATUS, status)
    resumed_tokens = resumed.tokens if resumed is not None else 0
    if resumed is not None and resumed_tokens >= run.max_tokens:  # the earlier attempts used up max_tokens
        done = GenerationResult(
            text=resumed.text,
            input_tokens=resumed.prompt_tokens or 0,
            output_tokens=resumed_tokens,
            finish_reason=EngineFinishReason.LENGTH,
        )
        return _finish(run_id=run_id, attempt=attempt, result=done)
    active = runtime.register(run_id=run_id, attempt=attempt)
    handed_off = False
    try:
        try:
            prompt = build_run_prompt(run=run, answer_prefix=resumed.text if resumed is not None else "")
            request = run_generation_request(
                run=run,
                request_id=active.request_id,
                prompt=prompt,
                engine_priority=engine_priority,
                resumed_tokens=resumed_tokens,
            )
        except Exception as exc:  # a prompt (or stored sampling) we cannot use fails this run, not the worker
            logger.exception("run %s: building the prompt failed", run_id)
            return _fail(run_id=run_id, attempt=attempt, error=f"Could not build the prompt: {exc}")
        streams = settings.STREAMS
        coalescer = DeltaCoalescer(
            writer,
            interval_s=current_flush_interval,
            max_tokens=streams.flush_max_tokens,
            owns=lambda: runtime.holds(run_id),
            # Past the lease's TTL without Redis the lease is gone: the run is the reaper's to requeue.
            outage_limit_s=float(settings.WORKERS.heartbeat_ttl_s),
            logprobs=request.sampling.logprobs is not None,
        )
        # The run's input tokens are its own prompt's, as the attempt that began the answer counted them: the
        # continuation's prompt also holds the answer so far, which is output (counted in output_tokens), not input.
        input_tokens = (resumed.prompt_tokens or 0) if resumed is not None else 0
        output_tokens = 0  # this attempt's
        if resumed is not None:
            coalescer.seed(resumed)
        finish_reason = EngineFinishReason.ABORT
        if runtime.cancel_pending(run_id):  # cancelled between the claim and now: nothing to generate
            empty = GenerationResult(
                text=coalescer.text,
                input_tokens=input_tokens,
                output_tokens=resumed_tokens,
                finish_reason=EngineFinishReason.ABORT,
            )
            return _finish(run_id=run_id, attempt=attempt, result=empty)
        last_abort = 0.0
        try:
            try:
                for delta in runtime.host.stream(request, poll_s=coalescer.wait_s):
                    if active.handoff_requested.is_set() and (delta is None or delta.finish_reason is None):
                        # The worker drains past its deadline: what is in the coalescer goes to the stream (below)
                        # and another worker goes on from there; this delta and what the engine still had are
                        # dropped (the stream is the answer so far, and no client saw them).
                        runtime.host.abort(request.request_id)
                        handed_off = True
                        break
                    if active.cancel_requested.is_set() and time.monotonic() - last_abort > 0.5:
                        # An abort that reached the engine before the request did is a no-op: repeat it.
                        runtime.host.abort(request.request_id)
                        last_abort = time.monotonic()
                    if delta is None:
                        coalescer.flush_if_due()
                        continue
                    if delta.prompt_tokens is not None:
                        if resumed is None:
                            input_tokens = coalescer.prompt_tokens = delta.prompt_tokens
                        elif resumed.prompt_tokens is None:  # not in the stream: this prompt less the answer so far
                            input_tokens = max(0, delta.prompt_tokens - resumed_tokens)
                    first_token = output_tokens == 0 and delta.new_tokens > 0
                    output_tokens += delta.new_tokens
                    # The first text goes out before any bookkeeping.
                    coalescer.add(delta.text, delta.new_tokens, delta.logprobs)
                    if first_token:
                        _mark_first_token(run_id=run_id, attempt=attempt)
                        timing: dict[str, object] = {} if delta.timing is None else dict(delta.timing.as_fields())
                        log_run_step(
                            RunStep.FIRST_TOKEN,
                            run,
                            f"run {run_id}: first token (attempt {attempt})",
                            attempt=attempt,
                            ttft_s=seconds_between(run.created_at, timezone.now()),
                            engine_priority=request.priority,
                            worker=None,
                            level=logging.INFO,
                            **timing,  # worker and level given: these can only be record fields
                        )
                    if delta.finish_reason is not None:
                        finish_reason = EngineFinishReason(delta.finish_reason)
            except EngineDied as exc:
                # Not this run's fault: its lease is released (below) and the reaper requeues it on a live worker.
                logger.error("run %s: the engine died (%s); attempt %s stops for the reaper", run_id, exc, attempt)
                return None
            except EngineError as exc:
                coalescer.drain()
                return _fail(run_id=run_id, attempt=attempt, error=f"The engine failed: {exc}")
            coalescer.drain()
        except StreamLost as exc:
            runtime.host.abort(request.request_id)
            logger.warning("run %s: %s; attempt %s stops and the reaper requeues the run", run_id, exc, attempt)
            return None
    finally:
        runtime.unregister(run_id)

    if handed_off and _hand_off(run_id=run_id, attempt=attempt, runtime=runtime):
        return None
    result = GenerationResult(
        text=coalescer.text,
        input_tokens=input_tokens,
        output_tokens=resumed_tokens + output_tokens,
        finish_reason=finish_reason,
    )
    return _finish(run_id=run_id, attempt=attempt, result=result)


def _hand_off(*, run_id: int, attempt: int, runtime: WorkerRuntime) -> bool:
    """Gives the run back to the queue for another worker (its text so far is in the stream); False when it is no
    longer this attempt's to hand on (cancelled meanwhile, or superseded): the attempt then ends it as usual.

    The lease goes first, so the next worker's claim finds it free; should the reaper see the run without it
    before the requeue commits, it requeues the run itself and the handoff finds nothing to do."""
    runtime.release(run_id)
    handed = _with_db_retry(
        lambda: run_handoff(run_id=run_id, attempt=attempt, worker=runtime.worker_name),
        run_id=run_id,
        what="handing it off",
    )
    if handed is None:
        return False
    logger.info("run %s: attempt %s handed it off (the worker drains)", run_id, attempt)
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


def _mark_first_token(*, run_id: int, attempt: int) -> None:
    try:
        run_mark_first_token(run_id=run_id, attempt=attempt)
    except CONNECTION_ERRORS as exc:  # a statistic: not worth holding the stream up while Postgres restarts
        connection.close()
        logger.warning("run %s: could not record its first token (%s)", run_id, exc)


def _finish(*, run_id: int, attempt: int, result: GenerationResult) -> RunStatus | None:
    finished = _with_db_retry(
        lambda: run_finish(run_id=run_id, attempt=attempt, result=result), run_id=run_id, what="storing its answer"
    )
    if finished is None:
        logger.warning("run %s: attempt %s was superseded; its result is dropped", run_id, attempt)
        return None
    return RunStatus(finished.status)


def _fail(*, run_id: int, attempt: int, error: str) -> RunStatus | None:
    failed = _with_db_retry(
        lambda: run_fail(run_id=run_id, error=error, attempt=attempt), run_id=run_id, what="failing it"
    )
    return RunStatus.FAILED if failed is not None else None
