"""What a GPU worker does with a run: claim, generate, stream, finish.

Stream events written here (see ``runs.streaming.contract``): ``status`` {status, attempt, worker} when
generation starts; ``reset`` {attempt} first when a previous attempt had written events (clients drop its
text); ``delta`` {text, tokens}. The terminal ``done`` or ``error`` event is written by the run lifecycle
when the run ends (``runs.services``), whoever ends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from core.generation import EngineFinishReason, GenerationResult
from inference_workers.engine.base import GenerationRequest
from inference_workers.engine.host import EngineError
from inference_workers.prompting import build_run_prompt
from inference_workers.runtime import WorkerRuntime
from runs.events import RunEvent, log_run_event, seconds_between
from runs.models import RunStatus
from runs.services import run_fail, run_finish, run_mark_first_token, run_mark_streaming
from runs.streaming.contract import RunStreamWriter, StreamEvent
from runs.streaming.load import current_flush_interval

logger = logging.getLogger(__name__)


class DeltaCoalescer:
    """Buffers deltas: the first text goes out at once, then every ``interval_s`` or ``max_tokens`` tokens."""

    def __init__(self, writer: RunStreamWriter, *, interval_s: Callable[[], float], max_tokens: int) -> None:
        self.writer = writer
        self.interval_s = interval_s
        """Called at each flush decision: the interval grows with the number of live streams."""
        self.max_tokens = max_tokens
        self.parts: list[str] = []
        self.text_parts: list[str] = []
        self.buffered_tokens = 0
        self.last_flush = 0.0
        self.flushes = 0

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def add(self, text: str, tokens: int) -> None:
        if not text and not tokens:
            return
        self.parts.append(text)
        self.text_parts.append(text)
        self.buffered_tokens += tokens
        if self.flushes == 0 or self.buffered_tokens >= self.max_tokens:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        if self.parts and time.monotonic() - self.last_flush >= self.interval_s():
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        text = "".join(self.parts)
        if text:
            self.writer.append(StreamEvent.DELTA, {"text": text, "tokens": self.buffered_tokens})
            self.flushes += 1
        self.parts.clear()
        self.buffered_tokens = 0
        self.last_flush = time.monotonic()


def generate_run(*, run_id: int, runtime: WorkerRuntime) -> RunStatus | None:
    """Generates one run on this worker's engine; returns its final status (None: not ours to generate).

    Safe to call again for the same run (a redelivered task): a run that another live attempt holds is
    skipped, a run whose previous attempt died restarts with a ``reset`` event, and only the attempt that
    still owns the run may write its assistant message.
    """
    if not runtime.claim(run_id):
        logger.info("run %s: another attempt holds it; skipping this delivery", run_id)
        return None
    try:
        return _generate_claimed(run_id=run_id, runtime=runtime)
    finally:
        runtime.release(run_id)


def _generate_claimed(*, run_id: int, runtime: WorkerRuntime) -> RunStatus | None:
    run, changed = run_mark_streaming(run_id=run_id, worker=runtime.worker_name)
    if not changed:
        return None
    if run.is_terminal:  # it was cancelling when its previous worker died, or ran out of attempts
        return RunStatus(run.status)
    writer = RunStreamWriter(run_id)

    attempt = run.attempts
    if writer.seq > 0:
        writer.append(StreamEvent.RESET, {"attempt": attempt})
    writer.append(StreamEvent.STATUS, {"status": run.status, "attempt": attempt, "worker": runtime.worker_name})
    active = runtime.register(run_id=run_id, attempt=attempt)
    try:
        try:
            prompt = build_run_prompt(run=run)
        except Exception as exc:  # a prompt we cannot build fails this run, not the worker
            logger.exception("run %s: building the prompt failed", run_id)
            return _fail(run_id=run_id, attempt=attempt, error=f"Could not build the prompt: {exc}")
        request = GenerationRequest(
            request_id=active.request_id,
            prompt=prompt,
            max_tokens=run.max_tokens,
            temperature=run.temperature,
            top_p=run.top_p,
            priority=run.priority,
        )
        streams = settings.STREAMS
        coalescer = DeltaCoalescer(writer, interval_s=current_flush_interval, max_tokens=streams.flush_max_tokens)
        input_tokens = output_tokens = 0
        finish_reason = EngineFinishReason.ABORT
        if runtime.cancel_pending(run_id):  # cancelled between the claim and now: nothing to generate
            empty = GenerationResult(text="", input_tokens=0, output_tokens=0, finish_reason=EngineFinishReason.ABORT)
            return _finish(run_id=run_id, attempt=attempt, result=empty)
        last_abort = 0.0
        try:
            for delta in runtime.host.stream(request, poll_s=streams.flush_interval_s):
                if active.cancel_requested.is_set() and time.monotonic() - last_abort > 0.5:
                    # An abort that reached the engine before the request did is a no-op: repeat it.
                    runtime.host.abort(request.request_id)
                    last_abort = time.monotonic()
                if delta is None:
                    coalescer.flush_if_due()
                    continue
                if delta.prompt_tokens is not None:
                    input_tokens = delta.prompt_tokens
                first_token = output_tokens == 0 and delta.new_tokens > 0
                output_tokens += delta.new_tokens
                coalescer.add(delta.text, delta.new_tokens)  # the first text goes out before any bookkeeping
                if first_token:
                    run_mark_first_token(run_id=run_id, attempt=attempt)
                    log_run_event(
                        RunEvent.FIRST_TOKEN,
                        run,
                        f"run {run_id}: first token (attempt {attempt})",
                        attempt=attempt,
                        ttft_s=seconds_between(run.created_at, timezone.now()),
                    )
                if delta.finish_reason is not None:
                    finish_reason = EngineFinishReason(delta.finish_reason)
        except EngineError as exc:
            coalescer.flush()
            return _fail(run_id=run_id, attempt=attempt, error=f"The engine failed: {exc}")
        coalescer.flush()
    finally:
        runtime.unregister(run_id)

    result = GenerationResult(
        text=coalescer.text, input_tokens=input_tokens, output_tokens=output_tokens, finish_reason=finish_reason
    )
    return _finish(run_id=run_id, attempt=attempt, result=result)


def _finish(*, run_id: int, attempt: int, result: GenerationResult) -> RunStatus | None:
    finished = run_finish(run_id=run_id, attempt=attempt, result=result)
    if finished is None:
        logger.warning("run %s: attempt %s was superseded; its result is dropped", run_id, attempt)
        return None
    return RunStatus(finished.status)


def _fail(*, run_id: int, attempt: int, error: str) -> RunStatus | None:
    failed = run_fail(run_id=run_id, error=error, attempt=attempt)
    return RunStatus.FAILED if failed is not None else None
